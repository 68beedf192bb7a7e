// Generation for one sequence at a time: prefill the prompt as one step, then decode token by
// token, each step drawing the next token on the backend (backend.h) with the sequence's
// sampler, and an incremental detokenizer. The command line and the tests use it; the server's
// scheduler batches many sequences over one backend instead.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/engine/backend.h"
#include "framework/engine/detokenizer.h"
#include "framework/engine/kv_block_allocator.h"
#include "framework/engine/sampler.h"

namespace chatflow::engine {

struct GenerationRequest {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 128;
  std::vector<std::string> stop;  // stop strings
  bool ignore_eos = false;
};

enum class StopReason { end_of_generation, length, stop_string, stopped_by_caller };

struct GeneratedToken {
  SampledToken sampled;
  std::string text;  // the text delta this token released (may be empty)
};

struct GenerationResult {
  std::vector<TokenId> tokens;
  std::string text;
  StopReason reason = StopReason::length;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

class Generator {
 public:
  // A KV cache sized for one full context, on the backend `backend` names (make_backend).
  Generator(std::shared_ptr<const Model> model, int threads, std::string_view backend = "cpu");

  // `on_token` is called for every generated token; returning false stops generation.
  // Throws std::length_error when the prompt does not fit the context.
  GenerationResult generate(const GenerationRequest& request,
                            const std::function<bool(const GeneratedToken&)>& on_token = {});

  const Model& model() const { return *model_; }

 private:
  // One step of `tokens` at the end of `sequence`, drawing the next token.
  SampledToken step(KvSequence& sequence, std::span<const TokenId> tokens, Sampler& sampler,
                    std::span<const TokenId> history);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  KvBlockAllocator blocks_;
  StepOutput output_;
};

}  // namespace chatflow::engine
