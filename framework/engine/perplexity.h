// A model's perplexity on a text, measured as llama-perplexity measures it: the text tokenised
// once (BOS as the vocabulary asks), cut into windows of `context` tokens that do not overlap,
// each window's first token replaced by BOS, and the second half of each window scored
// (-log p of each next token). Optionally the scored log-probabilities are saved, or compared
// with saved ones (KL divergence, top-token agreement), to see what a quantisation costs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "framework/engine/model.h"
#include "kernels/kv_type.h"

namespace chatflow::engine {

struct PerplexityOptions {
  int64_t context = 512;
  int64_t batch = 512;  // tokens per forward step
  int64_t chunks = -1;  // at most this many windows; -1 all
  int threads = 1;
  std::string backend = "cpu";  // where to compute (make_backend: cpu, cuda, auto)
  kernels::KvType kv_type = kernels::KvType::f16;  // how the KV cache stores keys and values
  std::string save_log_probs;                      // write the scored log-probabilities here
  std::string compare_log_probs;                   // compare against log-probabilities saved before
};

struct PerplexityResult {
  int64_t text_tokens = 0;
  int64_t chunks = 0;
  int64_t scored = 0;  // tokens scored
  double perplexity = 0;
  double uncertainty = 0;  // one standard error, in perplexity units
  double seconds = 0;
  // With compare_log_probs:
  bool compared = false;
  double base_perplexity = 0;
  double kl_divergence = 0;        // mean KL(base || this model), nats
  double kl_uncertainty = 0;       // its standard error
  double top_token_agreement = 0;  // fraction of positions whose most likely token agrees
};

// After each window: windows done, windows in all, the estimate so far.
using PerplexityProgress = std::function<void(int64_t done, int64_t chunks, double estimate)>;

// Throws std::invalid_argument when the text is shorter than two windows, std::runtime_error
// for a log-probability file that cannot be written, read, or does not match (another text,
// context or vocabulary).
PerplexityResult measure_perplexity(std::shared_ptr<const Model> model, const std::string& text,
                                    const PerplexityOptions& options,
                                    const PerplexityProgress& progress = {});

}  // namespace chatflow::engine
