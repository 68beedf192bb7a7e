// A deliberately plain forward pass for tests: every weight dequantised up front, one token at a
// time, a contiguous KV cache, double-precision sums. Slow, obvious, and independent of the
// engine's kernels and cache layout. The input of a quantised matrix is rounded to 8 bits per
// block first (amax / 127 scales, blocks of the weights' block size), as the engine specifies.
#pragma once

#include <vector>

#include "framework/engine/model.h"

namespace chatflow::testing {

class ReferenceTransformer {
 public:
  explicit ReferenceTransformer(const engine::Model& model);

  // Appends `token` at the next position and returns the logits after it.
  std::vector<float> step(engine::TokenId token);

 private:
  struct Matrix {
    std::vector<float> values;
    kernels::TensorType type;
  };
  struct Layer {
    Matrix query, key, value, output, gate, up, down;
  };
  std::vector<float> multiply(const Matrix& matrix, const std::vector<float>& x,
                              int64_t rows) const;

  const engine::Model& model_;
  std::vector<float> embedding_;
  Matrix output_;
  std::vector<Layer> layers_;
  std::vector<std::vector<std::vector<float>>> keys_, values_;  // [layer][position][kv_dim]
  int64_t position_ = 0;
};

}  // namespace chatflow::testing
