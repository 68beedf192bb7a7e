#include "framework/engine/transformer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include <tbb/enumerable_thread_specific.h>

namespace chatflow::engine {
namespace {

// Below this many multiply-adds a matrix product is not worth splitting across threads.
constexpr int64_t kParallelWork = 1 << 18;

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float epsilon) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + epsilon);
  for (int64_t i = 0; i < n; ++i)
    out[i] = (x[i] * scale) * weight[i];
}

void add_bias(float* rows, const std::vector<float>& bias, int64_t tokens) {
  const int64_t width = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < width; ++i)
      rows[t * width + i] += bias[static_cast<size_t>(i)];
  }
}

}  // namespace

struct Transformer::Workspace {
  std::vector<float> hidden, normed, query, key, value, attention, projected, gate, up, activated;
  std::vector<float> rope_cos, rope_sin, final_rows;
  std::vector<int64_t> positions;
  std::vector<KvSequence*> owners;
  std::vector<int64_t> logit_tokens;
  tbb::enumerable_thread_specific<std::vector<float>> scratch;

  static float* sized(std::vector<float>& buffer, int64_t size) {
    if (buffer.size() < static_cast<size_t>(size)) buffer.resize(static_cast<size_t>(size));
    return buffer.data();
  }
};

Transformer::Transformer(std::shared_ptr<const Model> model, const kernels::CpuKernelTable& kernels)
    : model_(std::move(model)), kernels_(kernels), workspace_(std::make_unique<Workspace>()) {}

Transformer::~Transformer() = default;

void Transformer::forward(std::span<const SequenceChunk> chunks, KvCache& cache,
                          ComputeThreads& threads, std::span<float> logits) {
  const ModelConfig& config = model_->config();
  Workspace& ws = *workspace_;
  const int64_t dim = config.dim;
  const int64_t head_dim = config.head_dim;
  const int64_t q_dim = config.heads * head_dim;
  const int64_t kv_dim = config.kv_heads * head_dim;
  const int64_t group = config.heads / config.kv_heads;
  const int64_t block_tokens = cache.block_tokens();

  // Lay the chunks out as one list of tokens, each with its sequence and position.
  int64_t tokens = 0;
  int64_t logit_rows = 0;
  for (const auto& chunk : chunks) {
    tokens += static_cast<int64_t>(chunk.tokens.size());
    logit_rows += chunk.logits && !chunk.tokens.empty() ? 1 : 0;
  }
  if (tokens == 0) return;
  if (static_cast<int64_t>(logits.size()) < logit_rows * config.vocabulary) {
    throw std::invalid_argument("logits buffer too small for " + std::to_string(logit_rows) +
                                " rows");
  }
  ws.positions.clear();
  ws.owners.clear();
  ws.logit_tokens.clear();
  float* hidden = Workspace::sized(ws.hidden, tokens * dim);
  for (const auto& chunk : chunks) {
    KvSequence& sequence = *chunk.sequence;
    int64_t end = sequence.length + static_cast<int64_t>(chunk.tokens.size());
    if (end > config.context) {
      throw std::length_error("sequence of " + std::to_string(end) +
                              " tokens exceeds the model's context of " +
                              std::to_string(config.context));
    }
    if (static_cast<int64_t>(sequence.blocks.size()) * block_tokens < end) {
      throw std::logic_error("KV positions were not reserved before the forward pass");
    }
    for (size_t i = 0; i < chunk.tokens.size(); ++i) {
      TokenId id = chunk.tokens[i];
      if (id < 0 || id >= config.vocabulary) {
        throw std::out_of_range("token id " + std::to_string(id) +
                                " is outside the vocabulary of " +
                                std::to_string(config.vocabulary));
      }
      int64_t t = static_cast<int64_t>(ws.positions.size());
      dequantize_row(model_->token_embedding(), id, hidden + t * dim);
      ws.positions.push_back(sequence.length + static_cast<int64_t>(i));
      ws.owners.push_back(&sequence);
    }
    if (chunk.logits && !chunk.tokens.empty())
      ws.logit_tokens.push_back(static_cast<int64_t>(ws.positions.size()) - 1);
  }

  // Rotary angles per token, computed as llama.cpp does (repeated multiplication in float).
  const int64_t rope_pairs = config.rope_dimensions / 2;
  float* rope_cos = Workspace::sized(ws.rope_cos, tokens * rope_pairs);
  float* rope_sin = Workspace::sized(ws.rope_sin, tokens * rope_pairs);
  const float theta_scale =
      std::pow(config.rope_base, -2.0f / static_cast<float>(config.rope_dimensions));
  for (int64_t t = 0; t < tokens; ++t) {
    float theta = static_cast<float>(ws.positions[t]) * config.rope_position_scale;
    for (int64_t i = 0; i < rope_pairs; ++i) {
      rope_cos[t * rope_pairs + i] = std::cos(theta);
      rope_sin[t * rope_pairs + i] = std::sin(theta);
      theta *= theta_scale;
    }
  }
  auto rotate = [&](float* head, int64_t t) {
    const float* cosines = rope_cos + t * rope_pairs;
    const float* sines = rope_sin + t * rope_pairs;
    for (int64_t i = 0; i < rope_pairs; ++i) {
      int64_t a = config.rope_style == RopeStyle::adjacent_pairs ? 2 * i : i;
      int64_t b = config.rope_style == RopeStyle::adjacent_pairs ? 2 * i + 1 : i + rope_pairs;
      float x0 = head[a];
      float x1 = head[b];
      head[a] = x0 * cosines[i] - x1 * sines[i];
      head[b] = x0 * sines[i] + x1 * cosines[i];
    }
  };

  // Products of several matrices with the same input (q, k and v; gate and up) share one
  // parallel loop over all their panels: fewer hand-offs between threads, and each thread
  // prefetches straight from one matrix into the next.
  struct Product {
    const WeightMatrix& weights;
    float* y;
  };
  auto matmuls = [&](std::initializer_list<Product> products, const float* x, int64_t count) {
    constexpr size_t kMost = 3;  // q, k and v
    if (products.size() > kMost) throw std::logic_error("at most three products share a loop");
    std::array<int64_t, kMost + 1> first_panel{};
    int64_t work = 0;
    bool packed = true;
    size_t i = 0;
    for (const Product& product : products) {
      packed = packed && product.weights.panels != nullptr;
      work += product.weights.rows * product.weights.columns * count;
      first_panel[i + 1] =
          first_panel[i] + (product.weights.rows + kernels::kPanelRows - 1) / kernels::kPanelRows;
      ++i;
    }
    if (packed) {
      const int64_t panels = first_panel[products.size()];
      int64_t grain =
          work < kParallelWork ? panels : std::max<int64_t>(1, panels / (threads.threads() * 4));
      threads.parallel_for(panels, grain, [&](int64_t begin, int64_t end) {
        size_t index = 0;
        for (const Product& product : products) {
          const WeightMatrix& weights = product.weights;
          int64_t low = std::max(begin, first_panel[index]) - first_panel[index];
          int64_t high = std::min(end, first_panel[index + 1]) - first_panel[index];
          if (low < high) {
            kernels_.packed_matmul[kernels::packed_index(weights.type)](
                {weights.panels, weights.rows, weights.columns, low, high, x, weights.columns,
                 count, product.y, weights.rows});
          }
          ++index;
        }
      });
      return;
    }
    for (const Product& product : products) {
      const WeightMatrix& weights = product.weights;
      auto kernel = kernels_.matmul[kernels::matmul_index(weights.type)];
      int64_t rows_work = weights.rows * weights.columns * count;
      int64_t grain = rows_work < kParallelWork
                          ? weights.rows
                          : std::max<int64_t>(16, weights.rows / (threads.threads() * 4));
      threads.parallel_for(weights.rows, grain, [&](int64_t begin, int64_t end) {
        float* scratch =
            Workspace::sized(ws.scratch.local(), kernels::matmul_scratch_floats(count));
        kernel({weights.data, weights.row_bytes, weights.columns, begin, end, x, weights.columns,
                count, product.y, weights.rows, scratch});
      });
    }
  };
  auto matmul = [&](const WeightMatrix& weights, const float* x, int64_t count, float* y) {
    matmuls({{weights, y}}, x, count);
  };

  float* normed = Workspace::sized(ws.normed, tokens * dim);
  float* query = Workspace::sized(ws.query, tokens * q_dim);
  float* key = Workspace::sized(ws.key, tokens * kv_dim);
  float* value = Workspace::sized(ws.value, tokens * kv_dim);
  float* attended = Workspace::sized(ws.attention, tokens * q_dim);
  float* projected = Workspace::sized(ws.projected, tokens * dim);
  float* gate = Workspace::sized(ws.gate, tokens * config.ffn);
  float* up = Workspace::sized(ws.up, tokens * config.ffn);
  float* activated = Workspace::sized(ws.activated, tokens * config.ffn);
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const size_t block_stride = cache.block_stride();
  const auto attention_kernel = kernels_.attention[static_cast<int>(cache.type())];
  // Where position `position` of `sequence` keeps layer `layer`'s keys (or values): the element
  // index into the pool of its block.
  auto block_start = [&](const KvSequence& sequence, int64_t position) {
    return static_cast<size_t>(sequence.blocks[static_cast<size_t>(position / block_tokens)]) *
           block_stride;
  };
  // Stores `count` values at element `index` of the pool, `stride` elements apart.
  auto store_kv = [&](size_t index, const float* values, int64_t count, int64_t stride) {
    if (cache.type() == kernels::KvType::f16) {
      kernels_.to_f16(values, static_cast<uint16_t*>(cache.pool()) + index, count, stride);
    } else {
      auto* pool = static_cast<float*>(cache.pool()) + index;
      for (int64_t i = 0; i < count; ++i)
        pool[i * stride] = values[i];
    }
  };

  // Work per token (norms, rotations, KV stores) in one piece per thread, when there is enough
  // of it to be worth a hand-off.
  const int64_t token_grain = tokens * dim * static_cast<int64_t>(sizeof(float)) < (64 << 10)
                                  ? tokens
                                  : (tokens + threads.threads() - 1) / threads.threads();
  auto for_tokens = [&](auto&& body) {
    threads.parallel_for(tokens, token_grain, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        body(t);
    });
  };
  threads.run([&] {
    for (int64_t layer = 0; layer < config.layers; ++layer) {
      const LayerWeights& weights = model_->layers()[static_cast<size_t>(layer)];
      for_tokens([&](int64_t t) {
        rms_norm(hidden + t * dim, weights.attention_norm.data(), normed + t * dim, dim,
                 config.rms_epsilon);
      });
      matmuls({{weights.query, query}, {weights.key, key}, {weights.value, value}}, normed, tokens);
      if (config.attention_bias) {
        add_bias(query, weights.query_bias, tokens);
        add_bias(key, weights.key_bias, tokens);
        add_bias(value, weights.value_bias, tokens);
      }
      // Every new token's keys and values go into the cache before any attention reads them.
      for_tokens([&](int64_t t) {
        for (int64_t h = 0; h < config.heads; ++h)
          rotate(query + t * q_dim + h * head_dim, t);
        for (int64_t h = 0; h < config.kv_heads; ++h)
          rotate(key + t * kv_dim + h * head_dim, t);
        int64_t position = ws.positions[t];
        size_t block = block_start(*ws.owners[t], position);
        int64_t slot = position % block_tokens;
        for (int64_t g = 0; g < config.kv_heads; ++g) {
          store_kv(block + cache.key_offset(layer, g) + static_cast<size_t>(slot),
                   key + t * kv_dim + g * head_dim, head_dim, block_tokens);
          store_kv(block + cache.value_offset(layer, g) + static_cast<size_t>(slot * head_dim),
                   value + t * kv_dim + g * head_dim, head_dim, 1);
        }
      });
      int64_t attention_work = 0;
      for (int64_t t = 0; t < tokens; ++t)
        attention_work += (ws.positions[t] + 1) * q_dim;
      int64_t items = tokens * config.kv_heads;
      // Enough (token, head) items per task that scheduling stays a small part of the work.
      int64_t attention_grain = attention_work < kParallelWork
                                    ? items
                                    : std::max<int64_t>(1, items / (8 * threads.threads()));
      // An item's keys and values come from memory no one has touched this step, in blocks
      // anywhere in the pool: all of the next item's blocks are fetched while this item
      // computes, so the memory system always has a whole item's worth of requests in flight.
      auto prefetch_item = [&](int64_t item) {
        int64_t t = item / config.kv_heads;
        int64_t g = item % config.kv_heads;
        const auto* pool = static_cast<const char*>(cache.pool());
        const KvSequence& sequence = *ws.owners[t];
        const size_t bytes = static_cast<size_t>(head_dim * block_tokens) * cache.element_bytes();
        const int64_t blocks = ws.positions[t] / block_tokens + 1;
        for (int64_t b = 0; b < blocks; ++b) {
          size_t block = block_start(sequence, b * block_tokens);
          const char* keys = pool + (block + cache.key_offset(layer, g)) * cache.element_bytes();
          const char* values =
              pool + (block + cache.value_offset(layer, g)) * cache.element_bytes();
          for (size_t line = 0; line < bytes; line += 64) {
            __builtin_prefetch(keys + line);
            __builtin_prefetch(values + line);
          }
        }
      };
      threads.parallel_for(items, attention_grain, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
          if (item == begin) prefetch_item(item);
          if (item + 1 < end) prefetch_item(item + 1);
          int64_t t = item / config.kv_heads;
          int64_t g = item % config.kv_heads;
          int64_t positions = ws.positions[t] + 1;
          int64_t padded = (positions + block_tokens - 1) / block_tokens * block_tokens;
          float* scores = Workspace::sized(ws.scratch.local(), group * padded);
          attention_kernel({query + t * q_dim + g * group * head_dim, group, head_dim, cache.pool(),
                            ws.owners[t]->blocks.data(), block_stride, cache.key_offset(layer, g),
                            cache.value_offset(layer, g), block_tokens, positions, attention_scale,
                            scores, attended + t * q_dim + g * group * head_dim});
        }
      });
      matmul(weights.output, attended, tokens, projected);
      for_tokens([&](int64_t t) {
        for (int64_t i = t * dim; i < (t + 1) * dim; ++i)
          hidden[i] += projected[i];
        rms_norm(hidden + t * dim, weights.ffn_norm.data(), normed + t * dim, dim,
                 config.rms_epsilon);
      });
      matmuls({{weights.gate, gate}, {weights.up, up}}, normed, tokens);
      for_tokens([&](int64_t t) {
        kernels_.silu_multiply(gate + t * config.ffn, up + t * config.ffn,
                               activated + t * config.ffn, config.ffn);
      });
      matmul(weights.down, activated, tokens, projected);
      for (int64_t i = 0; i < tokens * dim; ++i)
        hidden[i] += projected[i];
    }

    const int64_t rows = static_cast<int64_t>(ws.logit_tokens.size());
    if (rows > 0) {
      float* final_rows = Workspace::sized(ws.final_rows, rows * dim);
      for (int64_t r = 0; r < rows; ++r) {
        rms_norm(hidden + ws.logit_tokens[r] * dim, model_->output_norm().data(),
                 final_rows + r * dim, dim, config.rms_epsilon);
      }
      matmul(model_->output(), final_rows, rows, logits.data());
    }
  });

  for (const auto& chunk : chunks)
    chunk.sequence->length += static_cast<int64_t>(chunk.tokens.size());
}

}  // namespace chatflow::engine
