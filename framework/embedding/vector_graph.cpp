#include "framework/embedding/vector_graph.h"

// hnswlib 0.6's SSE path prefetches one link past the end of a node's list (an out-of-bounds
// read AddressSanitizer reports); without it the graph code is plain C++, and the distance is
// ours below.
#define NO_MANUAL_VECTORIZATION
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <hnswlib/hnswlib.h>

namespace chatflow::embedding {

namespace {

// 1 - a·b for unit vectors, eight lanes at a time (GCC vector extensions), the tail one by one;
// compiled for AVX-512, AVX2 and the baseline, and chosen once by what the CPU has. (Not with
// target_clones: its ifunc resolver runs before ThreadSanitizer's runtime is up.)
template <int Variant>
float dot_lanes(const float* a, const float* b, size_t dimensions) {
  using Lanes = float __attribute__((vector_size(32)));
  Lanes sum = {};
  size_t i = 0;
  for (; i + 8 <= dimensions; i += 8) {
    Lanes x, y;
    std::memcpy(&x, a + i, sizeof x);
    std::memcpy(&y, b + i, sizeof y);
    sum += x * y;
  }
  float dot = 0;
  for (int lane = 0; lane < 8; ++lane)
    dot += sum[lane];
  for (; i < dimensions; ++i)
    dot += a[i] * b[i];
  return dot;
}

__attribute__((target("avx512f"))) float dot_avx512(const float* a, const float* b, size_t n) {
  return dot_lanes<2>(a, b, n);
}
__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, size_t n) {
  return dot_lanes<1>(a, b, n);
}
float dot_baseline(const float* a, const float* b, size_t n) {
  return dot_lanes<0>(a, b, n);
}

using DotFunction = float (*)(const float*, const float*, size_t);

DotFunction best_dot() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return dot_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return dot_avx2;
  return dot_baseline;
}

const DotFunction kDot = best_dot();

float cosine_distance(const void* left, const void* right, const void* dimensions_pointer) {
  return 1.0f - kDot(static_cast<const float*>(left), static_cast<const float*>(right),
                     *static_cast<const size_t*>(dimensions_pointer));
}

class CosineSpace final : public hnswlib::SpaceInterface<float> {
 public:
  explicit CosineSpace(size_t dimensions) : dimensions_(dimensions) {}
  size_t get_data_size() override { return dimensions_ * sizeof(float); }
  hnswlib::DISTFUNC<float> get_dist_func() override { return cosine_distance; }
  void* get_dist_func_param() override { return &dimensions_; }

 private:
  size_t dimensions_;
};

}  // namespace

struct VectorGraph::Impl {
  explicit Impl(size_t dimensions) : space(dimensions) {}
  CosineSpace space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> graph;
};

VectorGraph::VectorGraph(size_t dimensions, size_t capacity, size_t links, size_t ef_construction,
                         size_t ef_search)
    : impl_(std::make_unique<Impl>(dimensions)) {
  impl_->graph = std::make_unique<hnswlib::HierarchicalNSW<float>>(
      &impl_->space, std::max<size_t>(capacity, 1), links, ef_construction);
  impl_->graph->setEf(ef_search);
}

VectorGraph::VectorGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<VectorGraph> VectorGraph::load(const std::string& path, size_t dimensions,
                                               size_t ef_search) {
  auto impl = std::make_unique<Impl>(dimensions);
  impl->graph = std::make_unique<hnswlib::HierarchicalNSW<float>>(&impl->space, path);
  if (impl->graph->data_size_ != dimensions * sizeof(float)) {
    throw std::runtime_error(path + ": the vectors have " +
                             std::to_string(impl->graph->data_size_ / sizeof(float)) +
                             " dimensions, the embedder makes " + std::to_string(dimensions));
  }
  impl->graph->setEf(ef_search);
  return std::unique_ptr<VectorGraph>(new VectorGraph(std::move(impl)));
}

VectorGraph::~VectorGraph() = default;

void VectorGraph::add(const float* vector, size_t label) {
  auto& graph = *impl_->graph;
  if (graph.cur_element_count >= graph.max_elements_) graph.resizeIndex(graph.max_elements_ * 2);
  graph.addPoint(vector, label);
}

void VectorGraph::remove(size_t label) {
  impl_->graph->markDelete(label);
}

std::vector<std::pair<size_t, float>> VectorGraph::search(const float* query, size_t k) const {
  std::vector<std::pair<size_t, float>> found;
  size_t count = impl_->graph->cur_element_count;
  if (k == 0 || count == 0) return found;
  auto nearest = impl_->graph->searchKnn(query, std::min(k, count));
  while (!nearest.empty()) {
    found.emplace_back(nearest.top().second, 1.0f - nearest.top().first);
    nearest.pop();
  }
  std::reverse(found.begin(), found.end());
  return found;
}

size_t VectorGraph::size() const {
  return impl_->graph->cur_element_count;
}

void VectorGraph::save(const std::string& path) const {
  impl_->graph->saveIndex(path);
}

}  // namespace chatflow::embedding
