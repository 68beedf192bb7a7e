#include "stages/llm_reranker.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "stages/gguf_model.h"

namespace chatflow {
namespace {

constexpr int kAlternatives = 20;
constexpr size_t kPassageChars = 1200;

class LlmReranker final : public retrieval::Reranker {
 public:
  LlmReranker(std::shared_ptr<GgufModel> model, const Request& request)
      : model_(std::move(model)), salt_(request.identity.tenant), request_(request) {
    for (const char* word : {"yes", " yes", "Yes", " Yes", "YES"}) {
      auto tokens = model_->tokenize(word, false, false);
      if (!tokens.empty()) yes_tokens_.insert(tokens.front());
    }
  }

  std::string name() const override { return "llm"; }

  void score(const std::string& query,
             std::vector<retrieval::Candidate>& candidates) const override {
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& candidate : candidates) {
      Request probe;
      probe.kind = RequestKind::chat;
      std::string passage = candidate.passage.text.substr(0, kPassageChars);
      probe.messages = {
          {"system", "You judge whether a passage helps answer a question. Reply yes or no."},
          {"user", "Question: " + query + "\n\nPassage: " + candidate.passage.title + "\n" +
                       passage + "\n\nIs the passage relevant to the question?"}};
      prompts.push_back(model_->encode_prompt(probe, true));
    }
    const Request& request = request_;
    auto alternatives = model_->next_token_logprobs(std::move(prompts), kAlternatives, salt_,
                                                    [&request] { return request.cancelled(); });
    for (size_t i = 0; i < candidates.size(); ++i) {
      // P(yes) summed over its spellings; when none is among the alternatives it is at most the
      // least likely alternative's probability.
      double yes = 0;
      double floor = 0;
      for (const auto& alternative : alternatives[i]) {
        floor = std::exp(alternative.logprob);
        if (yes_tokens_.count(alternative.token)) yes += std::exp(alternative.logprob);
      }
      candidates[i].rerank = std::log(yes > 0 ? yes : std::max(floor, 1e-30) * 0.5);
    }
  }

 private:
  std::shared_ptr<GgufModel> model_;
  std::string salt_;
  const Request& request_;
  std::set<int32_t> yes_tokens_;
};

}  // namespace

std::unique_ptr<retrieval::Reranker> make_llm_reranker(std::shared_ptr<GgufModel> model,
                                                       const Request& request) {
  return std::make_unique<LlmReranker>(std::move(model), request);
}

}  // namespace chatflow
