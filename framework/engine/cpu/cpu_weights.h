// Where the CPU backend reads a model's weights from: matrices of float types packed into panels
// for products over many tokens (kernels::pack_matrix), quantised matrices copied as they are,
// all in one arena of anonymous memory; the embedding table stays mapped from the file unless it
// is also the output matrix. The model (model.h) keeps its views of the file; this is the CPU's
// placement of them, made once per backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "framework/engine/model.h"

namespace chatflow::engine {

class CpuWeights {
 public:
  explicit CpuWeights(const Model& model);

  const WeightMatrix& token_embedding() const { return token_embedding_; }
  const WeightMatrix& output() const { return output_; }
  const std::vector<float>& output_norm() const { return *output_norm_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // Bytes the weights take here: the arena, and the embedding table when it stays mapped.
  uint64_t bytes() const { return bytes_; }

 private:
  struct FreeBytes {
    void operator()(uint8_t* bytes) const;
  };
  WeightMatrix token_embedding_;
  WeightMatrix output_;
  const std::vector<float>* output_norm_;
  std::vector<LayerWeights> layers_;
  std::unique_ptr<uint8_t[], FreeBytes> arena_;
  uint64_t bytes_ = 0;
};

}  // namespace chatflow::engine
