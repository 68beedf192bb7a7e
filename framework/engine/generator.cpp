#include "framework/engine/generator.h"

#include <chrono>
#include <stdexcept>

namespace chatflow::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Generator::Generator(std::shared_ptr<const Model> model, int threads)
    : model_(model),
      transformer_(model),
      threads_(threads),
      cache_(model->config(), 16, (model->config().context + 15) / 16) {}

GenerationResult Generator::generate(const GenerationRequest& request,
                                     const std::function<bool(const GeneratedToken&)>& on_token) {
  const ModelConfig& config = model_->config();
  const auto& vocabulary = model_->tokenizer().vocabulary();
  if (request.prompt.empty()) throw std::invalid_argument("the prompt has no tokens");
  if (static_cast<int64_t>(request.prompt.size()) >= config.context) {
    throw std::length_error("the prompt has " + std::to_string(request.prompt.size()) +
                            " tokens; the model's context holds " + std::to_string(config.context) +
                            " including at least one generated token");
  }
  GenerationResult result;
  KvSequence sequence;
  Sampler sampler(request.sampling);
  IncrementalDetokenizer detokenizer(model_->tokenizer(), request.stop);
  std::vector<float> logits(static_cast<size_t>(config.vocabulary));
  std::vector<TokenId> history;

  auto start = std::chrono::steady_clock::now();
  reserve(cache_, sequence, static_cast<int64_t>(request.prompt.size()));
  SequenceChunk prompt{&sequence, request.prompt, true};
  transformer_.forward({&prompt, 1}, cache_, threads_, logits);
  result.prefill_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  result.reason = StopReason::length;
  while (static_cast<int64_t>(result.tokens.size()) < request.max_tokens) {
    GeneratedToken generated;
    generated.sampled = sampler.sample(logits, history);
    TokenId token = generated.sampled.token;
    if (!request.ignore_eos && vocabulary.is_end_of_generation(token)) {
      result.reason = StopReason::end_of_generation;
      break;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    auto delta = detokenizer.push(token);
    generated.text = delta.text;
    bool keep_going = !on_token || on_token(generated);
    if (delta.stopped) {
      result.reason = StopReason::stop_string;
      break;
    }
    if (!keep_going) {
      result.reason = StopReason::stopped_by_caller;
      break;
    }
    if (static_cast<int64_t>(result.tokens.size()) >= request.max_tokens ||
        sequence.length + 1 > config.context) {
      result.reason = StopReason::length;
      break;
    }
    reserve(cache_, sequence, sequence.length + 1);
    SequenceChunk next{&sequence, {&result.tokens.back(), 1}, true};
    transformer_.forward({&next, 1}, cache_, threads_, logits);
  }
  if (result.reason != StopReason::stop_string) {
    auto tail = detokenizer.finish();
    if (!tail.text.empty() && on_token) on_token(GeneratedToken{{}, tail.text});
  }
  result.text = detokenizer.text();
  result.decode_seconds = seconds_since(start);
  release(cache_, sequence);
  return result;
}

}  // namespace chatflow::engine
