// An independent double-precision forward pass for the model families, written from their
// published definitions (Hugging Face transformers' Llama, Mistral, Qwen2, Qwen3, Gemma 2,
// Gemma 3 and Phi-3 modelling code) rather than from the engine: it reads the GGUF's keys and
// tensors itself, computes every sum in double, one token at a time, over a plain KV list.
// Weights of any type the engine computes with are dequantised up front; the input of a
// quantised matrix is rounded to 8 bits per block first, as the engine specifies (with
// llama.cpp's f16 sums for the offsets of q4_1 and q5_1 blocks); norms and biases must be f32. The
// engine's logits must agree with it; a family it does not know throws.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/engine/gguf_file.h"

namespace chatflow::testing {

class ArchitectureReference {
 public:
  explicit ArchitectureReference(const std::string& path);
  ~ArchitectureReference();

  // Appends `token` at the next position and returns the logits after it.
  std::vector<double> step(int32_t token);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace chatflow::testing
