// Approximate nearest neighbours by cosine similarity of unit vectors: an hnswlib graph behind a
// small interface. hnswlib 0.6 defines functions in its headers, so exactly one file of the
// project may include it: this one's .cpp.
//
// Searches may run concurrently with each other; add, remove and save need the caller to keep
// searches out.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace chatflow::embedding {

class VectorGraph {
 public:
  VectorGraph(size_t dimensions, size_t capacity, size_t links = 16, size_t ef_construction = 100,
              size_t ef_search = 64);
  // A graph written by save(). Throws std::runtime_error.
  static std::unique_ptr<VectorGraph> load(const std::string& path, size_t dimensions,
                                           size_t ef_search = 64);
  ~VectorGraph();

  // Grows the graph when it is full.
  void add(const float* vector, size_t label);
  // The label is never returned again.
  void remove(size_t label);
  // Up to `k` (label, cosine similarity) pairs, most similar first.
  std::vector<std::pair<size_t, float>> search(const float* query, size_t k) const;
  // Elements added, removed ones included.
  size_t size() const;
  void save(const std::string& path) const;

 private:
  struct Impl;
  explicit VectorGraph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chatflow::embedding
