// What the HTTP server needs from a model resource beyond what stages use: the id clients send
// as "model", tokenizer endpoints, and the engine's gauges and counters for /metrics. A resource
// that generates text implements it next to Resource; the server finds it in a built pipeline.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow {

struct EngineStats {
  int64_t running = 0;  // sequences being decoded
  int64_t waiting = 0;  // sequences queued for their first step
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;      // held by sequences or by the prefix cache
  int64_t kv_blocks_sequence = 0;  // block references held by live sequences
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t prompt_tokens_computed = 0;
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t draft_tokens = 0;     // guessed by speculative decoding and checked by the model
  int64_t accepted_tokens = 0;  // of those, the ones the model chose too
  // Where the model computes (framework/engine/backend.h): the backend ("cpu") and its device as
  // it names it; empty for a model that computes nowhere here.
  std::string backend;
  std::string device;
  int64_t weight_bytes = 0;     // its weights where it computes
  int64_t kv_pool_bytes = 0;    // the KV pool
  int64_t workspace_bytes = 0;  // activations and scratch, as large as its largest step so far
};

class ServedModel {
 public:
  virtual ~ServedModel() = default;

  virtual const std::string& model_id() const = 0;
  virtual int64_t context_length() const = 0;
  // `add_special`: the beginning-of-sequence token the model expects; `parse_special`: control
  // tokens written as text (e.g. "<|im_start|>") become their ids.
  virtual std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                        bool parse_special) const = 0;
  // Throws std::out_of_range naming the first id outside the vocabulary.
  virtual std::string detokenize(std::span<const int32_t> tokens) const = 0;
  virtual EngineStats engine_stats() const = 0;
  // False for a model that only counts tokens (a gguf_model with tokenizer_only: true, which a
  // gateway keeps beside its upstream): clients are not offered it while another model generates.
  virtual bool generates() const { return true; }
};

}  // namespace chatflow
