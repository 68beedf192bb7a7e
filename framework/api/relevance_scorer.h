// What a model that judges relevance offers POST /v1/rerank beside its pipeline: the score the
// rerank stage's `kind: llm` gives a passage (a gguf_model's log-probability of "yes" to "is
// this passage relevant to the question?"), for a query and the documents a client sends.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow {

class RelevanceScorer {
 public:
  virtual ~RelevanceScorer() = default;
  // False for a model that cannot compute (a tokenizer_only gguf_model).
  virtual bool scores_relevance() const = 0;
  // The prompt, as token ids, asking whether `document` helps answer `query`: the whole
  // document, never cut (the caller refuses one longer than relevance_context()).
  virtual std::vector<int32_t> relevance_prompt(std::string_view query,
                                                std::string_view document) const = 0;
  // The most tokens a prompt may have to be scored.
  virtual int64_t relevance_context() const = 0;
  // One score per prompt, in order: a log-probability, higher for a more relevant document.
  // The prompts share the engine's batches and the prefix cache under `cache_salt` (the
  // caller's tenant). Blocks; throws when the engine refuses or `cancelled` turns true.
  virtual std::vector<double> relevance_scores(std::vector<std::vector<int32_t>> prompts,
                                               const std::string& cache_salt,
                                               const std::function<bool()>& cancelled) = 0;
};

}  // namespace chatflow
