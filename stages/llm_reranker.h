// The model as a pointwise reranker: for each passage, the log-probability that the model
// answers "yes" to "is this passage relevant to the question?".
#pragma once

#include <memory>

#include "framework/api/request.h"
#include "framework/retrieval/hybrid.h"

namespace chatflow {

class GgufModel;

// Scores for `request` (its tenant salts the prefix cache; its cancellation stops the scoring).
std::unique_ptr<retrieval::Reranker> make_llm_reranker(std::shared_ptr<GgufModel> model,
                                                       const Request& request);

}  // namespace chatflow
