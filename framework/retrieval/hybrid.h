// Hybrid retrieval: BM25 and dense search for one query (side by side), fused by reciprocal
// rank or by weighted normalised scores; then an optional rerank of the fused candidates.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/retrieval/retrieval_index.h"

namespace chatflow::retrieval {

struct Candidate {
  Passage passage;
  double sparse = 0;       // BM25 weight, 0 when the sparse side did not find it
  double dense = 0;        // cosine similarity, 0 when the dense side did not find it
  size_t sparse_rank = 0;  // 1-based; 0: not found
  size_t dense_rank = 0;
  double fused = 0;
  double rerank = 0;
};

enum class Fusion { reciprocal_rank, weighted };

struct HybridOptions {
  size_t sparse_k = 50;  // 0: no sparse side
  size_t dense_k = 50;   // 0: no dense side
  size_t top_k = 20;
  Fusion fusion = Fusion::reciprocal_rank;
  double rrf_k = 60;
  double sparse_weight = 0.5;  // weighted fusion
  double dense_weight = 0.5;
  bool concurrently = true;
};

// Best first; at most top_k, every one readable by `reader`.
std::vector<Candidate> hybrid_search(const RetrievalIndex& index, const std::string& query,
                                     const HybridOptions& options, const Reader& reader);

// Sets each candidate's `rerank` score.
class Reranker {
 public:
  virtual ~Reranker() = default;
  virtual void score(const std::string& query, std::vector<Candidate>& candidates) const = 0;
  virtual std::string name() const = 0;
};

struct LexicalWeights {
  // Chosen by a small sweep on Cranfield (chatflow eval-retrieval --rerank-weights ...).
  double coverage = 0.1;   // IDF-weighted share of the query's words in the passage
  double proximity = 0.3;  // IDF-weighted share of neighbouring query words within 8 words
  double sparse = 0.5;     // BM25, relative to the best candidate's
  double dense = 0.1;      // cosine similarity
};

// A feature reranker: no model, a few microseconds per passage.
std::unique_ptr<Reranker> make_lexical_reranker(std::shared_ptr<const RetrievalIndex> index,
                                                LexicalWeights weights = {});

// Scores with `reranker`, sorts by it (ties keep the fused order), keeps the best `top_n`.
void rerank(const Reranker& reranker, const std::string& query, std::vector<Candidate>& candidates,
            size_t top_n);

}  // namespace chatflow::retrieval
