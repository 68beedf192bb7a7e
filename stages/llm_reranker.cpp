#include "stages/llm_reranker.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "stages/gguf_model.h"

namespace chatflow {
namespace {

constexpr int kAlternatives = 20;
// What the rerank stage shows of a retrieved passage: enough to judge it, little enough that
// many passages score in one batch. /v1/rerank shows a client's document whole.
constexpr size_t kPassageChars = 1200;

// The chat prompt asking whether `passage` helps answer `query`.
std::vector<int32_t> relevance_prompt_of(const GgufModel& model, std::string_view query,
                                         std::string_view passage) {
  Request probe;
  probe.kind = RequestKind::chat;
  probe.messages = {
      {"system", "You judge whether a passage helps answer a question. Reply yes or no."},
      {"user", "Question: " + std::string(query) + "\n\nPassage: " + std::string(passage) +
                   "\n\nIs the passage relevant to the question?"}};
  return model.encode_prompt(probe, true);
}

// Per prompt: the log of P(yes) summed over its spellings; when none is among the model's
// kAlternatives likeliest next tokens, P(yes) is at most the least likely alternative's
// probability, and half of that stands for it.
std::vector<double> yes_log_probabilities(GgufModel& model,
                                          std::vector<std::vector<int32_t>> prompts,
                                          const std::string& cache_salt,
                                          const std::function<bool()>& cancelled) {
  std::set<int32_t> yes_tokens;
  for (const char* word : {"yes", " yes", "Yes", " Yes", "YES"}) {
    auto tokens = model.tokenize(word, false, false);
    if (!tokens.empty()) yes_tokens.insert(tokens.front());
  }
  auto alternatives =
      model.next_token_logprobs(std::move(prompts), kAlternatives, cache_salt, cancelled);
  std::vector<double> scores;
  for (const auto& candidates : alternatives) {
    double yes = 0;
    double floor = 0;
    for (const auto& alternative : candidates) {
      floor = std::exp(alternative.logprob);
      if (yes_tokens.count(alternative.token)) yes += std::exp(alternative.logprob);
    }
    scores.push_back(std::log(yes > 0 ? yes : std::max(floor, 1e-30) * 0.5));
  }
  return scores;
}

class LlmReranker final : public retrieval::Reranker {
 public:
  LlmReranker(std::shared_ptr<GgufModel> model, const Request& request)
      : model_(std::move(model)), salt_(request.identity.tenant), request_(request) {}

  std::string name() const override { return "llm"; }

  void score(const std::string& query,
             std::vector<retrieval::Candidate>& candidates) const override {
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& candidate : candidates) {
      prompts.push_back(relevance_prompt_of(
          *model_, query,
          candidate.passage.title + "\n" + candidate.passage.text.substr(0, kPassageChars)));
    }
    const Request& request = request_;
    std::vector<double> scores = yes_log_probabilities(*model_, std::move(prompts), salt_,
                                                       [&request] { return request.cancelled(); });
    for (size_t i = 0; i < candidates.size(); ++i)
      candidates[i].rerank = scores[i];
  }

 private:
  std::shared_ptr<GgufModel> model_;
  std::string salt_;
  const Request& request_;
};

}  // namespace

std::unique_ptr<retrieval::Reranker> make_llm_reranker(std::shared_ptr<GgufModel> model,
                                                       const Request& request) {
  return std::make_unique<LlmReranker>(std::move(model), request);
}

std::vector<int32_t> GgufModel::relevance_prompt(std::string_view query,
                                                 std::string_view document) const {
  return relevance_prompt_of(*this, query, document);
}

int64_t GgufModel::relevance_context() const {
  // One position is the answer's: the engine refuses a prompt that leaves none, or that its KV
  // pool cannot hold.
  int64_t room = context_length_;
  if (scheduler_) room = std::min(room, scheduler_->capacity_tokens());
  return room - 1;
}

std::vector<double> GgufModel::relevance_scores(std::vector<std::vector<int32_t>> prompts,
                                                const std::string& cache_salt,
                                                const std::function<bool()>& cancelled) {
  return yes_log_probabilities(*this, std::move(prompts), cache_salt, cancelled);
}

}  // namespace chatflow
