#include "framework/engine/cpu/transformer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#include <tbb/enumerable_thread_specific.h>

#include "framework/engine/step_math.h"

namespace chatflow::engine {
namespace {

// Below this many multiply-adds a matrix product is not worth splitting across threads.
constexpr int64_t kParallelWork = 1 << 18;

// Rows per piece of a row-by-row product: all of them when the product is too small to be
// worth splitting, else about four pieces per thread.
int64_t row_grain(const WeightMatrix& weights, int64_t count, int threads) {
  const int64_t rows_work = weights.rows * weights.columns * count;
  return rows_work < kParallelWork ? weights.rows
                                   : std::max<int64_t>(16, weights.rows / (threads * 4));
}

}  // namespace

struct Transformer::Workspace {
  std::vector<float> hidden, normed, query, key, value, attention, projected, gate, up, activated;
  // Rotation tables per token: [0] for full-attention layers, [1] for sliding-window layers
  // when those rotate differently (gemma3).
  std::vector<float> rope_cos[2], rope_sin[2];
  std::vector<float> final_rows;
  // Mixture of experts: router outputs, each token's chosen experts and their weights, and the
  // rows one expert works on.
  std::vector<float> router, chosen_weights, expert_outputs, expert_inputs, expert_results,
      shared_expert;
  std::vector<int64_t> chosen, expert_slots;
  std::vector<int64_t> positions;
  std::vector<std::span<const BlockId>> block_tables;  // each token's sequence's
  std::vector<int64_t> logit_tokens, token_logit_tokens;
  tbb::enumerable_thread_specific<std::vector<float>> scratch;
  // A step's input quantised for the integer kernels, per activation format.
  std::vector<uint8_t> activations[2];
  kernels::ActivationLayout activation_layouts[2];

  static float* sized(std::vector<float>& buffer, int64_t size) {
    if (buffer.size() < static_cast<size_t>(size)) buffer.resize(static_cast<size_t>(size));
    return buffer.data();
  }
};

// What one forward step works on: its shape and its buffers (in the workspace).
struct Transformer::Step {
  const ModelConfig& config;
  CpuKvPool& pool;
  ComputeThreads& threads;
  int64_t tokens;
  int64_t q_dim;
  int64_t kv_dim;
  int64_t token_grain;  // tokens per task for per-token work
  float* hidden;
  float* normed;
  float* query;
  float* key;
  float* value;
  float* attended;
  float* projected;

  // Per-token work (norms, rotations, KV stores) in one piece per thread, when there is enough
  // of it to be worth a hand-off.
  template <class Body>
  void for_tokens(Body&& body) {
    threads.parallel_for(tokens, token_grain, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        body(t);
    });
  }
};

Transformer::Transformer(std::shared_ptr<const Model> model, const CpuWeights& weights,
                         const kernels::CpuKernelTable& kernels)
    : model_(std::move(model)),
      weights_(weights),
      kernels_(kernels),
      workspace_(std::make_unique<Workspace>()) {}

Transformer::~Transformer() = default;

int64_t Transformer::logit_rows(std::span<const StepChunk> chunks) {
  return step_logit_rows(chunks);
}

uint64_t Transformer::workspace_bytes() const {
  const Workspace& work = *workspace_;
  uint64_t floats = 0;
  for (const auto* buffer : {&work.hidden,        &work.normed,         &work.query,
                             &work.key,           &work.value,          &work.attention,
                             &work.projected,     &work.gate,           &work.up,
                             &work.activated,     &work.rope_cos[0],    &work.rope_cos[1],
                             &work.rope_sin[0],   &work.rope_sin[1],    &work.final_rows,
                             &work.router,        &work.chosen_weights, &work.expert_outputs,
                             &work.expert_inputs, &work.expert_results, &work.shared_expert})
    floats += buffer->capacity();
  for (const auto& scratch : work.scratch)
    floats += scratch.capacity();
  return floats * sizeof(float) + work.activations[0].capacity() + work.activations[1].capacity();
}

// Lays the chunks out as one list of tokens, each with its position and its sequence's block
// table, and looks up their embeddings. Returns the number of tokens.
int64_t Transformer::layout_batch(std::span<const StepChunk> chunks, const CpuKvPool& pool,
                                  std::span<float> logits) {
  const ModelConfig& config = model_->config();
  Workspace& work = *workspace_;
  int64_t tokens = 0;
  for (const auto& chunk : chunks)
    tokens += static_cast<int64_t>(chunk.tokens.size());
  if (tokens == 0) return 0;
  const int64_t rows = logit_rows(chunks);
  if (static_cast<int64_t>(logits.size()) < rows * config.vocabulary) {
    throw std::invalid_argument("logits buffer too small for " + std::to_string(rows) + " rows");
  }
  check_step_chunks(config, pool.block_tokens(), chunks);
  work.positions.clear();
  work.block_tables.clear();
  work.logit_tokens.clear();
  work.token_logit_tokens.clear();
  float* hidden = Workspace::sized(work.hidden, tokens * config.dim);
  const WeightMatrix& embedding = weights_.token_embedding();
  for (const auto& chunk : chunks) {
    for (size_t i = 0; i < chunk.tokens.size(); ++i) {
      TokenId id = chunk.tokens[i];
      int64_t t = static_cast<int64_t>(work.positions.size());
      float* row = hidden + t * config.dim;
      kernels_.dequantize_row(embedding.type,
                              embedding.data + static_cast<size_t>(id) * embedding.row_bytes,
                              embedding.columns, row);
      if (config.embedding_scale != 1.0f) {
        for (int64_t i = 0; i < config.dim; ++i)
          row[i] *= config.embedding_scale;
      }
      work.positions.push_back(chunk.start + static_cast<int64_t>(i));
      work.block_tables.push_back(chunk.block_table);
      if (chunk.want == StepChunk::Want::every_logits) work.logit_tokens.push_back(t);
    }
    if (chunk.tokens.empty()) continue;
    const int64_t last = static_cast<int64_t>(work.positions.size()) - 1;
    if (chunk.want == StepChunk::Want::logits) work.logit_tokens.push_back(last);
    if (chunk.want == StepChunk::Want::token) work.token_logit_tokens.push_back(last);
  }
  // The rows of chunks that want a token come after the others.
  work.logit_tokens.insert(work.logit_tokens.end(), work.token_logit_tokens.begin(),
                           work.token_logit_tokens.end());
  return tokens;
}

// Rotary angles per token, computed as llama.cpp's rope does (repeated multiplication in float,
// then the frequency factor, the scaling and YaRN's blend per pair), so that files agree with it.
void Transformer::compute_rope_angles(int64_t tokens) {
  const ModelConfig& config = model_->config();
  Workspace& work = *workspace_;
  const int64_t pairs = config.rope_dimensions / 2;
  for (int table = 0; table < (config.sliding_rope_differs ? 2 : 1); ++table) {
    rope_angles(config, table == 0 ? config.rope : config.sliding_rope,
                std::span<const int64_t>(work.positions.data(), static_cast<size_t>(tokens)),
                Workspace::sized(work.rope_cos[table], tokens * pairs),
                Workspace::sized(work.rope_sin[table], tokens * pairs));
  }
}

// Products of several matrices with the same input (q, k and v; gate and up) share one parallel
// loop over all their panels: fewer hand-offs between threads, and each thread prefetches
// straight from one matrix into the next.
void Transformer::multiply(Step& step, std::initializer_list<Product> products, const float* x,
                           int64_t count) {
  constexpr size_t kMost = 3;  // q, k and v
  if (products.size() > kMost) throw std::logic_error("at most three products share a loop");
  ComputeThreads& threads = step.threads;
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
          kernels_.packed_matmul[kernels::float_type_index(weights.type)](
              {weights.panels, weights.rows, weights.columns, low, high, x, weights.columns, count,
               product.y, weights.rows});
        }
        ++index;
      }
    });
    return;
  }
  quantize_inputs(step, products, x, count);
  for (const Product& product : products) {
    const WeightMatrix& weights = product.weights;
    if (kernels::is_quantized(weights.type)) {
      multiply_quantized(step, product, count);
      continue;
    }
    auto kernel = kernels_.matmul[kernels::float_type_index(weights.type)];
    threads.parallel_for(weights.rows, row_grain(weights, count, threads.threads()),
                         [&](int64_t begin, int64_t end) {
                           float* scratch = Workspace::sized(workspace_->scratch.local(),
                                                             kernels::matmul_scratch_floats(count));
                           kernel({weights.data, weights.row_bytes, weights.columns, begin, end, x,
                                   weights.columns, count, product.y, weights.rows, scratch});
                         });
  }
}

// The input of quantised products as int8 blocks, once per format for all products sharing it.
void Transformer::quantize_inputs(Step& step, std::initializer_list<Product> products,
                                  const float* x, int64_t count) {
  bool wanted[2] = {false, false};
  int64_t columns = 0;
  for (const Product& product : products) {
    if (!kernels::is_quantized(product.weights.type)) continue;
    wanted[static_cast<int>(kernels::activation_format(product.weights.type))] = true;
    columns = product.weights.columns;
  }
  Workspace& work = *workspace_;
  for (int format = 0; format < 2; ++format) {
    if (!wanted[format]) continue;
    auto& layout = work.activation_layouts[format];
    layout = kernels::activation_layout(static_cast<kernels::ActivationFormat>(format), columns);
    auto& buffer = work.activations[format];
    if (buffer.size() < layout.token_bytes * static_cast<size_t>(count))
      buffer.resize(layout.token_bytes * static_cast<size_t>(count));
    auto quantize = kernels_.quantize_activations[format];
    step.threads.parallel_for(count, step.token_grain, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        quantize(x + t * columns, layout,
                 buffer.data() + static_cast<size_t>(t) * layout.token_bytes);
    });
  }
}

void Transformer::multiply_quantized(Step& step, const Product& product, int64_t count) {
  const WeightMatrix& weights = product.weights;
  const int format = static_cast<int>(kernels::activation_format(weights.type));
  const Workspace& work = *workspace_;
  auto kernel = kernels_.quantized_matmul[kernels::quantized_index(weights.type)];
  step.threads.parallel_for(
      weights.rows, row_grain(weights, count, step.threads.threads()),
      [&](int64_t begin, int64_t end) {
        kernel({weights.data, weights.row_bytes, weights.columns, begin, end,
                work.activations[format].data(), &work.activation_layouts[format], count, product.y,
                weights.rows});
      });
}

// Rotates every new token's queries and keys, and writes its keys and values into the cache
// before any attention reads them.
void Transformer::store_keys_and_values(Step& step, int64_t layer) {
  const ModelConfig& config = step.config;
  const Workspace& work = *workspace_;
  CpuKvPool& cache = step.pool;
  const int64_t head_dim = config.head_dim;
  const int64_t pairs = config.rope_dimensions / 2;
  const bool adjacent = config.rope_style == RopeStyle::adjacent_pairs;
  const int table = config.sliding_rope_differs && config.sliding_layer(layer) ? 1 : 0;
  auto store = kernels_.store_kv[static_cast<int>(cache.type())];
  char* pool = static_cast<char*>(cache.pool());
  step.for_tokens([&](int64_t t) {
    const float* cosines = work.rope_cos[table].data() + t * pairs;
    const float* sines = work.rope_sin[table].data() + t * pairs;
    for (int64_t h = 0; h < config.heads; ++h)
      kernels_.rope(step.query + t * step.q_dim + h * head_dim, cosines, sines, pairs, adjacent);
    for (int64_t h = 0; h < config.kv_heads; ++h)
      kernels_.rope(step.key + t * step.kv_dim + h * head_dim, cosines, sines, pairs, adjacent);
    const std::span<const BlockId> block_table = work.block_tables[t];
    const int64_t position = work.positions[t];
    for (int64_t g = 0; g < config.kv_heads; ++g) {
      store(step.key + t * step.kv_dim + g * head_dim,
            pool + cache.key_index(block_table, position, layer, g), head_dim,
            cache.key_dimension_stride());
      store(step.value + t * step.kv_dim + g * head_dim,
            pool + cache.value_index(block_table, position, layer, g), head_dim, 1);
    }
  });
}

// Attention of every new token, (token, KV head) items split across threads.
void Transformer::attend(Step& step, int64_t layer) {
  const ModelConfig& config = step.config;
  Workspace& work = *workspace_;
  const CpuKvPool& cache = step.pool;
  const int64_t head_dim = config.head_dim;
  const int64_t group = config.heads / config.kv_heads;
  const int64_t block_tokens = cache.block_tokens();
  const bool sliding = config.sliding_layer(layer);
  // The first position token t attends to: the window's start in a sliding-window layer.
  auto first_position = [&](int64_t t) {
    return sliding ? std::max<int64_t>(0, work.positions[t] + 1 - config.sliding_window) : 0;
  };
  int64_t attention_work = 0;
  for (int64_t t = 0; t < step.tokens; ++t)
    attention_work += (work.positions[t] + 1 - first_position(t)) * step.q_dim;
  const int64_t items = step.tokens * config.kv_heads;
  // Enough (token, head) items per task that scheduling stays a small part of the work.
  const int64_t grain = attention_work < kParallelWork
                            ? items
                            : std::max<int64_t>(1, items / (8 * step.threads.threads()));
  // An item's keys and values come from memory no one has touched this step, in blocks anywhere
  // in the pool: all of the next item's blocks are fetched while this item computes, so the
  // memory system always has a whole item's worth of requests in flight.
  auto prefetch_item = [&](int64_t item) {
    int64_t t = item / config.kv_heads;
    int64_t g = item % config.kv_heads;
    const auto* pool = static_cast<const char*>(cache.pool());
    const std::span<const BlockId> block_table = work.block_tables[t];
    const size_t bytes = cache.region_bytes();
    const int64_t blocks = work.positions[t] / block_tokens + 1;
    for (int64_t b = first_position(t) / block_tokens; b < blocks; ++b) {
      size_t block = cache.block_start(block_table, b * block_tokens);
      const char* keys = pool + block + cache.key_offset(layer, g);
      const char* values = pool + block + cache.value_offset(layer, g);
      for (size_t line = 0; line < bytes; line += 64) {
        __builtin_prefetch(keys + line);
        __builtin_prefetch(values + line);
      }
    }
  };
  const auto kernel = kernels_.attention[static_cast<int>(cache.type())];
  step.threads.parallel_for(items, grain, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      if (item == begin) prefetch_item(item);
      if (item + 1 < end) prefetch_item(item + 1);
      int64_t t = item / config.kv_heads;
      int64_t g = item % config.kv_heads;
      int64_t positions = work.positions[t] + 1;
      int64_t padded = (positions + block_tokens - 1) / block_tokens * block_tokens;
      float* scores = Workspace::sized(work.scratch.local(), group * padded);
      kernel({step.query + t * step.q_dim + g * group * head_dim, group, head_dim, cache.pool(),
              work.block_tables[t].data(), cache.block_stride(), cache.key_offset(layer, g),
              cache.value_offset(layer, g), block_tokens, positions, first_position(t),
              config.attention_scale, config.attention_softcap, scores,
              step.attended + t * step.q_dim + g * group * head_dim});
    }
  });
}

void Transformer::run_layer(Step& step, int64_t layer) {
  const ModelConfig& config = step.config;
  const LayerWeights& weights = weights_.layers()[static_cast<size_t>(layer)];
  const int64_t dim = config.dim;
  step.for_tokens([&](int64_t t) {
    kernels_.rms_norm(step.hidden + t * dim, weights.attention_norm.data(), step.normed + t * dim,
                      dim, config.rms_epsilon);
  });
  multiply(step,
           {{weights.query, step.query}, {weights.key, step.key}, {weights.value, step.value}},
           step.normed, step.tokens);
  if (config.attention_bias) {
    kernels_.add_bias(step.query, weights.query_bias.data(), step.q_dim, step.tokens);
    kernels_.add_bias(step.key, weights.key_bias.data(), step.kv_dim, step.tokens);
    kernels_.add_bias(step.value, weights.value_bias.data(), step.kv_dim, step.tokens);
  }
  if (config.query_key_norm) {
    const int64_t head_dim = config.head_dim;
    step.for_tokens([&](int64_t t) {
      for (int64_t h = 0; h < config.heads; ++h) {
        float* head = step.query + t * step.q_dim + h * head_dim;
        kernels_.rms_norm(head, weights.query_norm.data(), head, head_dim, config.rms_epsilon);
      }
      for (int64_t h = 0; h < config.kv_heads; ++h) {
        float* head = step.key + t * step.kv_dim + h * head_dim;
        kernels_.rms_norm(head, weights.key_norm.data(), head, head_dim, config.rms_epsilon);
      }
    });
  }
  store_keys_and_values(step, layer);
  attend(step, layer);
  multiply(step, {{weights.output, step.projected}}, step.attended, step.tokens);
  if (!weights.output_bias.empty())
    kernels_.add_bias(step.projected, weights.output_bias.data(), dim, step.tokens);
  step.for_tokens([&](int64_t t) {
    if (config.post_norms) {
      kernels_.rms_norm(step.projected + t * dim, weights.attention_post_norm.data(),
                        step.projected + t * dim, dim, config.rms_epsilon);
    }
    kernels_.add(step.hidden + t * dim, step.projected + t * dim, dim);
    kernels_.rms_norm(step.hidden + t * dim, weights.ffn_norm.data(), step.normed + t * dim, dim,
                      config.rms_epsilon);
  });
  if (config.experts > 0) {
    mixture_of_experts(step, weights);
  } else {
    feed_forward(step, weights.gate, weights.up, weights.down, step.normed, step.tokens,
                 step.projected);
  }
  if (config.post_norms) {
    step.for_tokens([&](int64_t t) {
      kernels_.rms_norm(step.projected + t * dim, weights.ffn_post_norm.data(),
                        step.projected + t * dim, dim, config.rms_epsilon);
    });
  }
  kernels_.add(step.hidden, step.projected, step.tokens * dim);
}

// gate, up and down of one feed-forward network over `count` rows of `x`, into `out`.
void Transformer::feed_forward(Step& step, const WeightMatrix& gate, const WeightMatrix& up,
                               const WeightMatrix& down, const float* x, int64_t count,
                               float* out) {
  Workspace& work = *workspace_;
  const int64_t width = gate.rows;
  float* gated = Workspace::sized(work.gate, count * width);
  float* upped = Workspace::sized(work.up, count * width);
  float* activated = Workspace::sized(work.activated, count * width);
  multiply(step, {{gate, gated}, {up, upped}}, x, count);
  const auto activate = step.config.activation == Activation::gelu_tanh ? kernels_.gelu_multiply
                                                                        : kernels_.silu_multiply;
  const int64_t grain = count * width < (1 << 14) ? count : std::max<int64_t>(1, count / 8);
  step.threads.parallel_for(count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      activate(gated + t * width, upped + t * width, activated + t * width, width);
  });
  multiply(step, {{down, out}}, activated, count);
}

// The router's softmax picks each token's experts; each expert runs once over all the tokens
// that chose it (its weights read once per step); each token sums its experts' outputs in the
// order it ranked them (as llama.cpp does), so its result does not depend on the batch.
void Transformer::mixture_of_experts(Step& step, const LayerWeights& weights) {
  const ModelConfig& config = step.config;
  Workspace& work = *workspace_;
  const int64_t tokens = step.tokens, experts = config.experts, used = config.experts_used;
  const int64_t dim = config.dim;
  float* router = Workspace::sized(work.router, tokens * experts);
  multiply(step, {{weights.router, router}}, step.normed, tokens);
  route_to_experts(config, router, tokens, work.chosen, work.chosen_weights);
  const std::vector<float>& chosen_weights = work.chosen_weights;
  float* outputs = Workspace::sized(work.expert_outputs, tokens * used * dim);
  std::vector<int64_t>& slots = work.expert_slots;
  for (int64_t e = 0; e < experts; ++e) {
    slots.clear();
    for (int64_t slot = 0; slot < tokens * used; ++slot) {
      if (work.chosen[static_cast<size_t>(slot)] == e) slots.push_back(slot);
    }
    if (slots.empty()) continue;
    const auto count = static_cast<int64_t>(slots.size());
    float* inputs = Workspace::sized(work.expert_inputs, count * dim);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t t = slots[static_cast<size_t>(i)] / used;
      std::copy_n(step.normed + t * dim, dim, inputs + i * dim);
    }
    float* results = Workspace::sized(work.expert_results, count * dim);
    feed_forward(step, weights.expert_gate[static_cast<size_t>(e)],
                 weights.expert_up[static_cast<size_t>(e)],
                 weights.expert_down[static_cast<size_t>(e)], inputs, count, results);
    for (int64_t i = 0; i < count; ++i)
      std::copy_n(results + i * dim, dim, outputs + slots[static_cast<size_t>(i)] * dim);
  }
  float* shared = nullptr;
  if (config.shared_expert_ffn > 0) {
    shared = Workspace::sized(work.shared_expert, tokens * dim);
    feed_forward(step, weights.gate, weights.up, weights.down, step.normed, tokens, shared);
  }
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = step.projected + t * dim;
    for (int64_t k = 0; k < used; ++k) {
      const float weight = chosen_weights[static_cast<size_t>(t * used + k)];
      const float* expert = outputs + (t * used + k) * dim;
      for (int64_t i = 0; i < dim; ++i)
        out[i] = k == 0 ? expert[i] * weight : out[i] + expert[i] * weight;
    }
    if (shared != nullptr) {
      float gate = 0;
      for (int64_t i = 0; i < dim; ++i)
        gate += weights.shared_expert_gate[static_cast<size_t>(i)] * step.normed[t * dim + i];
      gate = 1.0f / (1.0f + std::exp(-gate));
      for (int64_t i = 0; i < dim; ++i)
        out[i] += shared[t * dim + i] * gate;
    }
  }
}

void Transformer::final_logits(Step& step, std::span<float> logits) {
  Workspace& work = *workspace_;
  const int64_t dim = step.config.dim;
  const int64_t rows = static_cast<int64_t>(work.logit_tokens.size());
  if (rows == 0) return;
  float* final_rows = Workspace::sized(work.final_rows, rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    kernels_.rms_norm(step.hidden + work.logit_tokens[r] * dim, weights_.output_norm().data(),
                      final_rows + r * dim, dim, step.config.rms_epsilon);
  }
  multiply(step, {{weights_.output(), logits.data()}}, final_rows, rows);
  if (const float cap = step.config.final_softcap; cap > 0) {
    const int64_t count = rows * step.config.vocabulary;
    for (int64_t i = 0; i < count; ++i)
      logits[static_cast<size_t>(i)] = cap * std::tanh(logits[static_cast<size_t>(i)] / cap);
  }
}

void Transformer::forward(std::span<const StepChunk> chunks, CpuKvPool& pool,
                          ComputeThreads& threads, std::span<float> logits) {
  const int64_t tokens = layout_batch(chunks, pool, logits);
  if (tokens == 0) return;
  compute_rope_angles(tokens);
  const ModelConfig& config = model_->config();
  Workspace& work = *workspace_;
  const int64_t q_dim = config.heads * config.head_dim;
  const int64_t kv_dim = config.kv_heads * config.head_dim;
  const int64_t token_grain = tokens * config.dim * static_cast<int64_t>(sizeof(float)) < (64 << 10)
                                  ? tokens
                                  : (tokens + threads.threads() - 1) / threads.threads();
  Step step{config,
            pool,
            threads,
            tokens,
            q_dim,
            kv_dim,
            token_grain,
            work.hidden.data(),
            Workspace::sized(work.normed, tokens * config.dim),
            Workspace::sized(work.query, tokens * q_dim),
            Workspace::sized(work.key, tokens * kv_dim),
            Workspace::sized(work.value, tokens * kv_dim),
            Workspace::sized(work.attention, tokens * q_dim),
            Workspace::sized(work.projected, tokens * config.dim)};
  threads.run([&] {
    for (int64_t layer = 0; layer < config.layers; ++layer)
      run_layer(step, layer);
    final_logits(step, logits);
  });
}

}  // namespace chatflow::engine
