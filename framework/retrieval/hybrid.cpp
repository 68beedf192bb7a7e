#include "framework/retrieval/hybrid.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include <oneapi/tbb/parallel_invoke.h>
#include <xapian.h>

#include "framework/retrieval/stopwords.h"

namespace chatflow::retrieval {

std::vector<Candidate> hybrid_search(const RetrievalIndex& index, const std::string& query,
                                     const HybridOptions& options, const Reader& reader) {
  std::vector<ScoredChunk> sparse, dense;
  auto run_dense = [&] {
    if (options.dense_k > 0) dense = index.dense(index.embed(query), options.dense_k, reader);
  };
  if (options.concurrently && options.sparse_k > 0 && options.dense_k > 0) {
    // On the pipeline's own TBB workers: no thread is started per request.
    tbb::parallel_invoke([&] { sparse = index.sparse(query, options.sparse_k, reader); },
                         run_dense);
  } else {
    if (options.sparse_k > 0) sparse = index.sparse(query, options.sparse_k, reader);
    run_dense();
  }
  std::unordered_map<uint32_t, Candidate> by_id;
  auto note = [&](const std::vector<ScoredChunk>& list, bool is_sparse) {
    double best = 0, worst = 0;
    if (!list.empty()) {
      best = list.front().score;
      worst = list.back().score;
    }
    double weight = is_sparse ? options.sparse_weight : options.dense_weight;
    for (size_t rank = 0; rank < list.size(); ++rank) {
      Candidate& candidate = by_id[list[rank].id];
      candidate.passage.id = list[rank].id;
      (is_sparse ? candidate.sparse : candidate.dense) = list[rank].score;
      (is_sparse ? candidate.sparse_rank : candidate.dense_rank) = rank + 1;
      if (options.fusion == Fusion::reciprocal_rank) {
        candidate.fused += 1.0 / (options.rrf_k + static_cast<double>(rank + 1));
      } else {
        double span = best - worst;
        double normalised = span > 0 ? (list[rank].score - worst) / span : 1.0;
        candidate.fused += weight * normalised;
      }
    }
  };
  note(sparse, true);
  note(dense, false);
  std::vector<Candidate> candidates;
  candidates.reserve(by_id.size());
  for (auto& [id, candidate] : by_id)
    candidates.push_back(std::move(candidate));
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.fused != b.fused ? a.fused > b.fused : a.passage.id < b.passage.id;
  });
  if (candidates.size() > options.top_k) candidates.resize(options.top_k);
  for (auto& candidate : candidates)
    candidate.passage = index.passage(candidate.passage.id);
  return candidates;
}

namespace {

bool word_character(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  for (size_t i = 0; i < text.size();) {
    if (!word_character(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && word_character(static_cast<unsigned char>(text[j])))
      ++j;
    std::string word = text.substr(i, j - i);
    for (auto& c : word)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    words.push_back(std::move(word));
    i = j;
  }
  return words;
}

class LexicalReranker final : public Reranker {
 public:
  LexicalReranker(std::shared_ptr<const RetrievalIndex> index, LexicalWeights weights)
      : index_(std::move(index)), weights_(weights) {}

  std::string name() const override { return "lexical"; }

  void score(const std::string& query, std::vector<Candidate>& candidates) const override {
    Xapian::Stem stem("english");
    // The query's distinct content words in order, stemmed, with an IDF weight each.
    std::vector<std::string> terms;
    std::vector<double> idf;
    double total_chunks = static_cast<double>(std::max<size_t>(index_->chunk_count(), 1));
    for (const auto& word : words_of(query)) {
      if (stopwords().count(word)) continue;
      std::string stemmed = stem(word);
      if (std::find(terms.begin(), terms.end(), stemmed) != terms.end()) continue;
      double frequency = static_cast<double>(index_->document_frequency(word));
      terms.push_back(stemmed);
      idf.push_back(std::log(1.0 + total_chunks / (1.0 + frequency)));
    }
    double idf_sum = 0, pair_sum = 0;
    for (size_t t = 0; t < terms.size(); ++t) {
      idf_sum += idf[t];
      if (t + 1 < terms.size()) pair_sum += (idf[t] + idf[t + 1]) / 2;
    }
    double best_sparse = 0;
    for (const auto& candidate : candidates)
      best_sparse = std::max(best_sparse, candidate.sparse);
    for (auto& candidate : candidates) {
      // Where each query term occurs in the passage (title first).
      std::vector<std::vector<size_t>> positions(terms.size());
      std::vector<std::string> words =
          words_of(candidate.passage.title + " " + candidate.passage.text);
      for (size_t i = 0; i < words.size(); ++i) {
        auto found = std::find(terms.begin(), terms.end(), stem(words[i]));
        if (found != terms.end())
          positions[static_cast<size_t>(found - terms.begin())].push_back(i);
      }
      double covered = 0;
      for (size_t t = 0; t < terms.size(); ++t)
        if (!positions[t].empty()) covered += idf[t];
      // Neighbouring query terms that also stand near each other in the passage.
      double near = 0;
      for (size_t t = 0; t + 1 < terms.size(); ++t) {
        if (within(positions[t], positions[t + 1], kWindow)) near += (idf[t] + idf[t + 1]) / 2;
      }
      candidate.rerank = weights_.coverage * (idf_sum > 0 ? covered / idf_sum : 0) +
                         weights_.proximity * (pair_sum > 0 ? near / pair_sum : 0) +
                         weights_.sparse * (best_sparse > 0 ? candidate.sparse / best_sparse : 0) +
                         weights_.dense * candidate.dense;
    }
  }

 private:
  static constexpr size_t kWindow = 8;

  // Whether some position of `a` is at most `window` words from some position of `b` (both
  // ascending).
  static bool within(const std::vector<size_t>& a, const std::vector<size_t>& b, size_t window) {
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
      size_t distance = a[i] > b[j] ? a[i] - b[j] : b[j] - a[i];
      if (distance <= window) return true;
      if (a[i] < b[j])
        ++i;
      else
        ++j;
    }
    return false;
  }

  std::shared_ptr<const RetrievalIndex> index_;
  LexicalWeights weights_;
};

}  // namespace

std::unique_ptr<Reranker> make_lexical_reranker(std::shared_ptr<const RetrievalIndex> index,
                                                LexicalWeights weights) {
  return std::make_unique<LexicalReranker>(std::move(index), weights);
}

void rerank(const Reranker& reranker, const std::string& query, std::vector<Candidate>& candidates,
            size_t top_n) {
  reranker.score(query, candidates);
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.rerank > b.rerank; });
  if (candidates.size() > top_n) candidates.resize(top_n);
}

}  // namespace chatflow::retrieval
