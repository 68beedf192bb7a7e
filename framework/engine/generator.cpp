#include "framework/engine/generator.h"

#include <chrono>
#include <stdexcept>

namespace chatflow::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Generator::Generator(std::shared_ptr<const Model> model, int threads, std::string_view backend)
    : model_(model),
      backend_(make_backend(backend, model, {threads})),
      blocks_(16, (model->config().context + 15) / 16) {
  backend_->allocate_kv_pool(
      {blocks_.total_blocks(), blocks_.block_tokens(), kernels::KvType::f16});
}

SampledToken Generator::step(KvSequence& sequence, std::span<const TokenId> tokens,
                             Sampler& sampler, std::span<const TokenId> history) {
  StepChunk chunk;
  chunk.tokens = tokens;
  chunk.start = sequence.length;
  chunk.block_table = sequence.blocks;
  chunk.want = StepChunk::Want::token;
  chunk.draw = {&sampler.params(), sampler.next_uniform(), history, {}};
  backend_->forward({&chunk, 1}, output_);
  sequence.length += static_cast<int64_t>(tokens.size());
  return std::move(output_.tokens.front());
}

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
  std::vector<TokenId> history;

  auto start = std::chrono::steady_clock::now();
  reserve(blocks_, sequence, static_cast<int64_t>(request.prompt.size()));
  // Each step draws the token after it: the prompt's step the first one.
  SampledToken next = step(sequence, request.prompt, sampler, history);
  result.prefill_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  result.reason = StopReason::length;
  while (static_cast<int64_t>(result.tokens.size()) < request.max_tokens) {
    GeneratedToken generated;
    generated.sampled = std::move(next);
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
    reserve(blocks_, sequence, sequence.length + 1);
    next = step(sequence, {&result.tokens.back(), 1}, sampler, history);
  }
  if (result.reason != StopReason::stop_string) {
    auto tail = detokenizer.finish();
    if (!tail.text.empty() && on_token) on_token(GeneratedToken{{}, tail.text});
  }
  result.text = detokenizer.text();
  result.decode_seconds = seconds_since(start);
  release(blocks_, sequence);
  return result;
}

}  // namespace chatflow::engine
