// Writes llama or qwen2 GGUF models with random weights, of any shape and tensor type, for
// tests that must always run (no downloads) and for benchmarks of chosen sizes. The vocabulary
// is either generated (SentencePiece-style: special tokens, 256 byte tokens, printable ASCII and
// a few word pieces) or copied from another GGUF file.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/tensor_type.h"

namespace chatflow::engine {

struct ModelShape {
  // llama, qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3, phi3, or an encoder for embeddings:
  // bert (biases, LayerNorms, absolute positions, GELU) or nomic-bert (rotary positions, fused
  // qkv, SwiGLU)
  std::string architecture = "llama";
  int64_t dim = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t ffn = 128;
  int64_t context = 512;
  kernels::TensorType type = kernels::TensorType::f32;  // of the weight matrices; norms stay f32
  // A quantisation scheme by llama.cpp's name (q4_k_m, q8_0, ...): each matrix gets the type
  // the scheme gives it instead of `type`.
  std::string recipe;
  uint64_t seed = 1;
  bool tie_embeddings = false;
  float rope_base = 10000.0f;
  std::string vocabulary_from;  // a GGUF file to copy tokenizer.* from; empty: generate
  float weight_scale = 0.08f;   // standard deviation of the random weights
  // none, linear (factor 2), yarn (factor 4 over a quarter of the context), llama3 (Llama 3.1's
  // rope_freqs factors) or, for phi3, longrope (long and short factors, a quarter of the context
  // as the original).
  std::string rope_scaling = "none";
  // Sliding-window attention's window for the families that have one; 0: a quarter of the
  // context for gemma2, gemma3 and phi3 (so that tests see it act), none for the others.
  int64_t sliding_window = 0;
  // Mixture of experts: llama with experts is Mixtral's layout; qwen2moe needs them and adds a
  // shared expert. Every expert (and the shared one) has `ffn` as its feed-forward length.
  int64_t experts = 0;
  int64_t experts_used = 0;
  // <arch>.pooling_type for embedding models: "" (not written; bert and nomic-bert write mean),
  // mean, cls or last. bert and nomic-bert files get a generated WordPiece vocabulary unless
  // vocabulary_from is given.
  std::string pooling;
};

// The architectures and rope scalings write_random_model accepts, for messages.
const char* writable_architectures();

// Throws std::invalid_argument for impossible shapes (e.g. quantised rows not a multiple of 32).
void write_random_model(const ModelShape& shape, const std::string& path);

// Parameters (weights) a shape has with a vocabulary of `vocabulary` tokens.
int64_t parameter_count(const ModelShape& shape, int64_t vocabulary);

}  // namespace chatflow::engine
