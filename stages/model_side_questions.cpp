// The model's side questions: sequences run outside any request, for stages that ask the model
// something on the way (a query rewrite, a reranker's yes/no log-probability). They share the
// engine's batches with the requests' own sequences.
#include <algorithm>
#include <future>

#include "framework/bridge/engine_bridge.h"
#include "framework/text/utf8.h"
#include "stages/gguf_model.h"

namespace chatflow {

namespace {

// A side question to the engine (a rewrite, a relevance score): collects the sequence's tokens
// and the first token's alternatives, and hands them over once it ends.
class SideSequence final : public engine::SequenceObserver {
 public:
  explicit SideSequence(std::function<bool()> cancelled) : cancelled_(std::move(cancelled)) {}

  void on_token(const engine::SampledToken& token, bool first,
                const engine::SequenceUsage&) override {
    if (first) answer_.first_alternatives = token.top;
    answer_.tokens.push_back(token.token);
  }
  void on_finish(engine::FinishCause cause, const engine::SequenceUsage& usage) override {
    answer_.finish = cause;
    answer_.usage = usage;
    settle([&] { result_.set_value(std::move(answer_)); });
  }
  void on_error(const std::string& message) override {
    settle([&] { result_.set_exception(std::make_exception_ptr(std::runtime_error(message))); });
  }
  bool cancelled() const override { return cancelled_ && cancelled_(); }
  void on_dropped() override {
    settle(
        [&] { result_.set_exception(std::make_exception_ptr(std::runtime_error("cancelled"))); });
  }
  std::future<SideAnswer> future() { return result_.get_future(); }

 private:
  // The first outcome wins; a promise takes only one.
  template <class F>
  void settle(F&& action) {
    std::lock_guard lock(mutex_);
    if (settled_) return;
    settled_ = true;
    action();
  }

  std::function<bool()> cancelled_;
  SideAnswer answer_;  // engine thread only
  std::mutex mutex_;
  bool settled_ = false;
  std::promise<SideAnswer> result_;
};

}  // namespace

std::string GgufModel::generate_text(std::vector<int32_t> prompt, int64_t max_tokens,
                                     const std::string& cache_salt,
                                     const std::function<bool()>& cancelled) {
  engine::SequenceSpec spec;
  spec.prompt = std::move(prompt);
  spec.max_tokens = max_tokens;
  spec.sampling.temperature = 0;
  spec.cache_salt = cache_salt;
  return answer_text(ask_aside(std::move(spec), cancelled).get().tokens);
}

std::string GgufModel::answer_text(std::vector<int32_t> tokens) const {
  // The end-of-sequence token, when it came, is not text.
  if (!tokens.empty() && tokenizer().vocabulary().is_end_of_generation(tokens.back()))
    tokens.pop_back();
  return text::repair(detokenize(tokens));
}

GgufModel::AsideAnswer GgufModel::answer_aside(const Request& request, std::vector<int32_t> prompt,
                                               const PromptFacts& facts,
                                               const std::function<bool()>& cancelled) {
  require_engine();
  engine::SequenceSpec spec = to_sequence_spec(request);
  spec.prompt.assign(prompt.begin(), prompt.end());
  spec.max_tokens =
      answer_token_limit(request.generation, static_cast<int64_t>(spec.prompt.size()));
  if (auto error = scheduler_->validate(spec)) {
    throw RequestFailure(
        RequestError{400, "invalid_request_error", *error, "context_length_exceeded", "messages"});
  }
  spec.constraint = constraint_for(request.generation, facts.tool_format, facts.reasoning);
  SideAnswer side = ask_aside(std::move(spec), cancelled).get();
  AsideAnswer answer;
  answer.text = answer_text(std::move(side.tokens));
  answer.tool_format = facts.tool_format;
  answer.usage = to_usage(side.usage);
  answer.cut_at_length = side.finish == engine::FinishCause::length;
  return answer;
}

std::vector<std::vector<engine::TokenLogprob>> GgufModel::next_token_logprobs(
    std::vector<std::vector<int32_t>> prompts, int top, const std::string& cache_salt,
    const std::function<bool()>& cancelled) {
  std::vector<std::future<SideAnswer>> pending;
  for (auto& prompt : prompts) {
    engine::SequenceSpec spec;
    spec.prompt = std::move(prompt);
    spec.max_tokens = 1;
    // The alternatives come with the first token: one that ends the answer must still be drawn.
    spec.ignore_eos = true;
    spec.sampling.temperature = 0;
    spec.sampling.top_logprobs = std::clamp(top, 1, 20);
    spec.sampling.logprobs = true;
    spec.cache_salt = cache_salt;
    pending.push_back(ask_aside(std::move(spec), cancelled));
  }
  std::vector<std::vector<engine::TokenLogprob>> results;
  for (auto& result : pending)
    results.push_back(result.get().first_alternatives);
  return results;
}

std::future<SideAnswer> GgufModel::ask_aside(engine::SequenceSpec spec,
                                             const std::function<bool()>& cancelled) {
  if (!scheduler_) throw std::runtime_error("the gguf_model '" + name_ + "' is tokenizer_only");
  auto observer = std::make_shared<SideSequence>(cancelled);
  auto result = observer->future();
  if (auto error = scheduler_->submit(std::move(spec), observer)) observer->on_error(*error);
  return result;
}

}  // namespace chatflow
