#include "framework/engine/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "framework/engine/cuda/cuda_graph_plan.h"
#include "framework/engine/cuda/cuda_memory_plan.h"
#include "framework/engine/step_math.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/transformer_kernels.h"

namespace chatflow::engine {
namespace {

namespace cuda = kernels::cuda;
using cuda::DeviceArray;
using cuda::DeviceMatrix;

// Left free beside the plan for the CUDA runtime's own allocations and cuBLAS's workspace.
constexpr uint64_t kRuntimeHeadroom = uint64_t{512} << 20;

struct DeviceLayer {
  DeviceMatrix query, key, value, output, gate, up, down, router;
  std::vector<DeviceMatrix> expert_gate, expert_up, expert_down;
  const float *attention_norm = nullptr, *ffn_norm = nullptr;
  const float *query_bias = nullptr, *key_bias = nullptr, *value_bias = nullptr,
              *output_bias = nullptr;
  const float *query_norm = nullptr, *key_norm = nullptr;
  const float *attention_post_norm = nullptr, *ffn_post_norm = nullptr;
  const float* shared_expert_gate = nullptr;
};

// Every device buffer of a step, grown to the largest step so far.
struct StepBuffers {
  explicit StepBuffers(cuda::DeviceContext& context)
      : hidden(context, "hidden states"),
        normed(context, "normalised states"),
        query(context, "queries"),
        key(context, "keys"),
        value(context, "values"),
        attended(context, "attention outputs"),
        projected(context, "projections"),
        gate(context, "gate activations"),
        up(context, "up activations"),
        activated(context, "activations"),
        rope(context, "rotation tables"),
        final_rows(context, "final rows"),
        logits(context, "logits"),
        tile(context, "dequantised weights"),
        router(context, "router rows"),
        expert_outputs(context, "expert outputs"),
        expert_inputs(context, "expert inputs"),
        expert_results(context, "expert results"),
        shared_expert(context, "shared expert outputs"),
        expert_weights(context, "expert weights"),
        indices(context, "step indices"),
        draws(context, "greedy draws"),
        masks(context, "constraint masks"),
        penalty_tokens(context, "penalised tokens"),
        penalty_counts(context, "penalty counts"),
        penalty_raw(context, "penalised logits"),
        drawn(context, "drawn tokens") {}

  DeviceArray<float> hidden, normed, query, key, value, attended, projected, gate, up, activated,
      rope, final_rows, logits, tile, router, expert_outputs, expert_inputs, expert_results,
      shared_expert, expert_weights;
  DeviceArray<int32_t> indices;
  DeviceArray<cuda::GreedyDraw> draws;
  DeviceArray<uint64_t> masks;
  DeviceArray<int32_t> penalty_tokens, penalty_counts;
  DeviceArray<float> penalty_raw;
  DeviceArray<cuda::DrawnToken> drawn;

  uint64_t bytes() const {
    uint64_t total = indices.bytes() + draws.bytes() + masks.bytes() + penalty_tokens.bytes() +
                     penalty_counts.bytes() + penalty_raw.bytes() + drawn.bytes();
    for (const auto* buffer : {&hidden,
                               &normed,
                               &query,
                               &key,
                               &value,
                               &attended,
                               &projected,
                               &gate,
                               &up,
                               &activated,
                               &rope,
                               &final_rows,
                               &logits,
                               &tile,
                               &router,
                               &expert_outputs,
                               &expert_inputs,
                               &expert_results,
                               &shared_expert,
                               &expert_weights})
      total += buffer->bytes();
    return total;
  }

  // Where every buffer a step's kernels read or write is now: a captured graph replays only while
  // they stay where they were when it was captured.
  std::vector<const void*> addresses() const {
    std::vector<const void*> where{indices.data()};
    for (const auto* buffer : {&hidden, &normed, &query, &key, &value, &attended, &projected, &gate,
                               &up, &activated, &rope, &final_rows, &logits, &tile})
      where.push_back(buffer->data());
    return where;
  }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<const Model> model, const BackendOptions& options);
  ~CudaBackend() override;

  BackendInfo info() const override;
  const Model& model() const override { return *model_; }
  void allocate_kv_pool(const KvPoolShape& shape) override;
  void forward(std::span<const StepChunk> chunks, StepOutput& out) override;
  size_t kv_block_bytes() const override;
  void read_kv_block(BlockId block, std::span<std::byte> out) const override;
  void write_kv_block(BlockId block, std::span<const std::byte> bytes) override;

 private:
  void check_model_fits() const;
  DeviceMatrix upload(const WeightMatrix& matrix);
  const float* upload(const std::vector<float>& values, const char* what);
  void* keep(size_t bytes, const char* what);
  // Lays out the step's index arrays on the device; returns the logits rows' count.
  void upload_step(std::span<const StepChunk> chunks);
  void run_layer(int64_t layer);
  void feed_forward(const DeviceMatrix& gate, const DeviceMatrix& up, const DeviceMatrix& down,
                    const float* x, int64_t count, float* out);
  void mixture_of_experts(const DeviceLayer& layer);
  void multiply(const DeviceMatrix& weights, const float* x, int64_t count, float* y);
  void final_logits();
  // Embeddings, every layer and the logits rows of the step laid out now: the launches a decode
  // graph captures.
  void run_step_body();
  // Replays the graph captured for `bucket`, capturing it first (after running the step plainly,
  // which sizes every buffer for the bucket) when there is none or the buffers moved.
  void run_as_graph(int64_t bucket);
  void draw_tokens(std::span<const StepChunk> chunks, size_t first_row,
                   std::vector<SampledToken>& tokens);

  // The weights' device memory, freed with the backend or when its constructor throws half-way.
  struct Allocations {
    cuda::DeviceContext& context;
    std::vector<void*> blocks;
    ~Allocations() {
      for (void* block : blocks)
        context.release(block);
    }
  };

  std::shared_ptr<const Model> model_;
  BackendOptions options_;
  cuda::DeviceContext context_;
  Allocations allocations_{context_, {}};
  uint64_t weight_bytes_ = 0;
  DeviceMatrix token_embedding_, output_;
  const float* output_norm_ = nullptr;
  std::vector<DeviceLayer> layers_;
  cuda::KvLayout kv_layout_;
  void* pool_ = nullptr;
  int64_t pool_blocks_ = 0;
  std::unique_ptr<StepBuffers> buffers_;
  struct CapturedStep {
    int64_t bucket = 0;
    void* graph = nullptr;
    std::vector<const void*> addresses;
  };
  bool use_graphs_ = true;
  std::vector<int64_t> graph_buckets_;
  std::vector<CapturedStep> graphs_;
  int64_t padding_ = 0;  // tokens added to fill the step's graph bucket

  // The step in progress, on the host.
  int64_t tokens_ = 0;
  StepLayout layout_;
  std::vector<int32_t> host_indices_;
  cuda::StepPositions full_attention_{}, sliding_attention_{};
  const int32_t* token_ids_ = nullptr;
  const int32_t* logit_token_ids_ = nullptr;
  std::vector<float> router_rows_, chosen_weights_;
  std::vector<int64_t> chosen_;
  std::vector<float> host_logits_;
  SamplingScratch sampling_;
};

std::once_flag dequantised_types_logged;

size_t device_block_bytes(const cuda::KvLayout& layout) {
  return layout.block_elements() * (layout.type == kernels::KvType::f16 ? 2 : 4);
}

CudaBackend::CudaBackend(std::shared_ptr<const Model> model, const BackendOptions& options)
    : model_(std::move(model)), options_(options) {
  const ModelConfig& config = model_->config();
  if (config.head_dim > cuda::kMaxHeadDim) {
    throw std::invalid_argument("the CUDA backend's attention holds heads of at most " +
                                std::to_string(cuda::kMaxHeadDim) + " values; this model's are " +
                                std::to_string(config.head_dim) + ": use backend: cpu");
  }
  check_model_fits();
  std::set<std::string> dequantised;
  auto place = [&](const WeightMatrix& matrix) {
    if (matrix.data == nullptr) return DeviceMatrix{};
    if (!cuda::decodes_on_device(matrix.type))
      dequantised.insert(std::string(to_string(matrix.type)));
    return upload(matrix);
  };
  token_embedding_ = place(model_->token_embedding());
  output_ = model_->output().data == model_->token_embedding().data ? token_embedding_
                                                                    : place(model_->output());
  output_norm_ = upload(model_->output_norm(), "the output norm");
  for (const LayerWeights& weights : model_->layers()) {
    DeviceLayer layer;
    layer.query = place(weights.query);
    layer.key = place(weights.key);
    layer.value = place(weights.value);
    layer.output = place(weights.output);
    layer.gate = place(weights.gate);
    layer.up = place(weights.up);
    layer.down = place(weights.down);
    layer.router = place(weights.router);
    for (const auto& matrix : weights.expert_gate)
      layer.expert_gate.push_back(place(matrix));
    for (const auto& matrix : weights.expert_up)
      layer.expert_up.push_back(place(matrix));
    for (const auto& matrix : weights.expert_down)
      layer.expert_down.push_back(place(matrix));
    layer.attention_norm = upload(weights.attention_norm, "norm weights");
    layer.ffn_norm = upload(weights.ffn_norm, "norm weights");
    layer.query_bias = upload(weights.query_bias, "biases");
    layer.key_bias = upload(weights.key_bias, "biases");
    layer.value_bias = upload(weights.value_bias, "biases");
    layer.output_bias = upload(weights.output_bias, "biases");
    layer.query_norm = upload(weights.query_norm, "norm weights");
    layer.key_norm = upload(weights.key_norm, "norm weights");
    layer.attention_post_norm = upload(weights.attention_post_norm, "norm weights");
    layer.ffn_post_norm = upload(weights.ffn_post_norm, "norm weights");
    layer.shared_expert_gate = upload(weights.shared_expert_gate, "the shared expert's gate");
    layers_.push_back(std::move(layer));
  }
  if (!dequantised.empty()) {
    std::call_once(dequantised_types_logged, [&] {
      std::string types;
      for (const auto& type : dequantised)
        types += (types.empty() ? "" : ", ") + type;
      std::clog << "chatflow: the CUDA backend has no device decoder for " << types
                << ": those weights are dequantised to f32 at load (4 bytes per weight)\n";
    });
  }
  buffers_ = std::make_unique<StepBuffers>(context_);
  const char* graphs = std::getenv("CHATFLOW_CUDA_GRAPHS");
  use_graphs_ = graphs == nullptr || std::string_view(graphs) != "0";
  graph_buckets_ = decode_graph_buckets(options_.max_step_tokens);
}

CudaBackend::~CudaBackend() {
  for (const CapturedStep& captured : graphs_)
    context_.destroy_graph(captured.graph);
  buffers_.reset();
  context_.release(pool_);
}

// The weights' bytes as they will sit on the device, against what is free, before any upload.
void CudaBackend::check_model_fits() const {
  DeviceMemoryPlan plan;
  plan.weight_bytes = model_->weight_bytes();
  plan.workspace_bytes = cuda_workspace_bytes(model_->config(), options_.max_step_tokens,
                                              options_.max_step_tokens, kCudaTileBytes);
  if (auto shortfall = device_memory_shortfall(plan, context_.free_bytes(), kRuntimeHeadroom,
                                               context_.device_name()))
    throw cuda::DeviceOutOfMemory(*shortfall);
}

void* CudaBackend::keep(size_t bytes, const char* what) {
  void* device = context_.allocate(bytes, what);
  allocations_.blocks.push_back(device);
  weight_bytes_ += bytes;
  return device;
}

DeviceMatrix CudaBackend::upload(const WeightMatrix& matrix) {
  DeviceMatrix placed{matrix.type, nullptr, matrix.rows, matrix.columns, matrix.row_bytes};
  if (cuda::decodes_on_device(matrix.type)) {
    const size_t bytes = matrix.row_bytes * static_cast<size_t>(matrix.rows);
    void* device = keep(bytes, "weights");
    context_.upload(device, matrix.data, bytes);
    placed.data = static_cast<const uint8_t*>(device);
    return placed;
  }
  // A band of rows at a time, so that the host never holds a whole f32 copy.
  placed.type = kernels::TensorType::f32;
  placed.row_bytes = static_cast<size_t>(matrix.columns) * sizeof(float);
  auto* device =
      static_cast<uint8_t*>(keep(placed.row_bytes * static_cast<size_t>(matrix.rows), "weights"));
  const int64_t band =
      std::max<int64_t>(1, (int64_t{16} << 20) / std::max<int64_t>(1, matrix.columns));
  std::vector<float> rows;
  for (int64_t first = 0; first < matrix.rows; first += band) {
    const int64_t count = std::min(band, matrix.rows - first);
    rows.resize(static_cast<size_t>(count * matrix.columns));
    for (int64_t r = 0; r < count; ++r)
      dequantize_row(matrix, first + r, rows.data() + r * matrix.columns);
    context_.upload(device + static_cast<size_t>(first) * placed.row_bytes, rows.data(),
                    rows.size() * sizeof(float));
  }
  placed.data = device;
  return placed;
}

const float* CudaBackend::upload(const std::vector<float>& values, const char* what) {
  if (values.empty()) return nullptr;
  void* device = keep(values.size() * sizeof(float), what);
  context_.upload(device, values.data(), values.size() * sizeof(float));
  return static_cast<const float*>(device);
}

BackendInfo CudaBackend::info() const {
  BackendInfo info;
  info.name = "cuda";
  info.device = context_.device_name() + " (sm_" + std::to_string(context_.compute_capability()) +
                ", " + format_device_bytes(context_.total_bytes()) + ")";
  info.memory.weight_bytes = weight_bytes_;
  info.memory.kv_pool_bytes =
      pool_ == nullptr ? 0 : kv_block_bytes() * static_cast<uint64_t>(pool_blocks_);
  info.memory.workspace_bytes = buffers_->bytes();
  // Greedy draws are made on the device; a sampled draw's row comes back to the host.
  info.samples_on_device = false;
  info.kv_types = {kernels::KvType::f16, kernels::KvType::f32};
  return info;
}

void CudaBackend::allocate_kv_pool(const KvPoolShape& shape) {
  if (pool_ != nullptr) throw std::logic_error("the KV pool is allocated once");
  if (shape.block_tokens <= 0 || shape.block_tokens % 16 != 0)
    throw std::invalid_argument("KV blocks hold a positive multiple of 16 positions, not " +
                                std::to_string(shape.block_tokens));
  if (shape.blocks <= 0) throw std::invalid_argument("a KV pool needs at least one block");
  if (shape.type != kernels::KvType::f16 && shape.type != kernels::KvType::f32) {
    throw std::invalid_argument("the CUDA backend stores KV as f16 or f32, not " +
                                std::string(kernels::to_string(shape.type)));
  }
  const ModelConfig& config = model_->config();
  kv_layout_ = {shape.type, config.layers, config.kv_heads, config.head_dim, shape.block_tokens};
  DeviceMemoryPlan plan;
  // One block more than asked: the scratch block the padding of a decode graph writes to.
  plan.kv_pool_bytes = device_block_bytes(kv_layout_) * static_cast<uint64_t>(shape.blocks + 1);
  plan.workspace_bytes = cuda_workspace_bytes(config, options_.max_step_tokens,
                                              options_.max_step_tokens, kCudaTileBytes);
  if (auto shortfall = device_memory_shortfall(plan, context_.free_bytes(), kRuntimeHeadroom,
                                               context_.device_name() + " (beside the weights)"))
    throw cuda::DeviceOutOfMemory(*shortfall);
  pool_ = context_.allocate(plan.kv_pool_bytes, "the KV pool");
  pool_blocks_ = shape.blocks;
}

size_t CudaBackend::kv_block_bytes() const {
  if (pool_ == nullptr) throw std::logic_error("no KV pool yet");
  return device_block_bytes(kv_layout_);
}

void CudaBackend::read_kv_block(BlockId block, std::span<std::byte> out) const {
  if (pool_ == nullptr) throw std::logic_error("no KV pool yet");
  if (block < 0 || block >= pool_blocks_ || out.size() != kv_block_bytes())
    throw std::out_of_range("KV block " + std::to_string(block) + " of " +
                            std::to_string(out.size()) + " bytes is not in the pool");
  const_cast<cuda::DeviceContext&>(context_).download(
      out.data(), static_cast<const std::byte*>(pool_) + static_cast<size_t>(block) * out.size(),
      out.size());
}

void CudaBackend::write_kv_block(BlockId block, std::span<const std::byte> bytes) {
  if (pool_ == nullptr) throw std::logic_error("no KV pool yet");
  if (block < 0 || block >= pool_blocks_ || bytes.size() != kv_block_bytes())
    throw std::out_of_range("KV block " + std::to_string(block) + " of " +
                            std::to_string(bytes.size()) + " bytes is not in the pool");
  context_.upload(static_cast<std::byte*>(pool_) + static_cast<size_t>(block) * bytes.size(),
                  bytes.data(), bytes.size());
}

// One int32 array on the device holds the step's token ids, each token's block, slot, table
// start, positions and first positions (full and sliding layers), the logits rows' tokens and
// every chunk's block table; one upload.
void CudaBackend::upload_step(std::span<const StepChunk> chunks) {
  const ModelConfig& config = model_->config();
  const int64_t tokens = tokens_;
  const int64_t block_tokens = kv_layout_.block_tokens;
  std::vector<int32_t>& host = host_indices_;
  const auto rows = static_cast<int64_t>(layout_.logit_tokens.size());
  host.assign(static_cast<size_t>(tokens * 7 + rows), 0);
  std::vector<int32_t> chunk_table_start(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    chunk_table_start[c] = static_cast<int32_t>(host.size());
    host.insert(host.end(), chunks[c].block_table.begin(), chunks[c].block_table.end());
  }
  const auto scratch_table = static_cast<int32_t>(host.size());
  host.push_back(static_cast<int32_t>(pool_blocks_));  // the scratch block, after the pool's
  int32_t* ids = host.data();
  int32_t* blocks = ids + tokens;
  int32_t* slots = blocks + tokens;
  int32_t* table_start = slots + tokens;
  int32_t* positions = table_start + tokens;
  int32_t* first_full = positions + tokens;
  int32_t* first_sliding = first_full + tokens;
  int32_t* logit_tokens = first_sliding + tokens;
  int64_t t = 0;
  for (const StepChunk& chunk : chunks) {
    for (size_t i = 0; i < chunk.tokens.size(); ++i, ++t) {
      const int64_t position = layout_.positions[static_cast<size_t>(t)];
      ids[t] = chunk.tokens[i];
      blocks[t] = chunk.block_table[static_cast<size_t>(position / block_tokens)];
      slots[t] = static_cast<int32_t>(position % block_tokens);
      table_start[t] =
          chunk_table_start[static_cast<size_t>(layout_.chunk_of_token[static_cast<size_t>(t)])];
      positions[t] = static_cast<int32_t>(position + 1);
      first_full[t] = 0;
      first_sliding[t] =
          config.sliding_window > 0
              ? static_cast<int32_t>(std::max<int64_t>(0, position + 1 - config.sliding_window))
              : 0;
    }
  }
  for (; t < tokens; ++t) {  // padding: token 0 at position 0 of the scratch block
    blocks[t] = static_cast<int32_t>(pool_blocks_);
    table_start[t] = scratch_table;
    positions[t] = 1;
  }
  for (int64_t r = 0; r < rows; ++r)
    logit_tokens[r] = static_cast<int32_t>(layout_.logit_tokens[static_cast<size_t>(r)]);
  int32_t* device = buffers_->indices.reserve(host.size());
  context_.upload(device, host.data(), host.size() * sizeof(int32_t));
  auto at = [&](const int32_t* host_pointer) { return device + (host_pointer - host.data()); };
  token_ids_ = device;
  logit_token_ids_ = at(logit_tokens);
  full_attention_ = {at(blocks), at(slots), device, at(table_start), at(positions), at(first_full)};
  sliding_attention_ = full_attention_;
  sliding_attention_.first_position = at(first_sliding);
}

void CudaBackend::multiply(const DeviceMatrix& weights, const float* x, int64_t count, float* y) {
  float* tile = nullptr;
  size_t tile_floats = 0;
  if (count > cuda::kMatVecTokens && weights.type != kernels::TensorType::f32) {
    tile_floats = static_cast<size_t>(
        std::min<uint64_t>(static_cast<uint64_t>(weights.rows * weights.columns),
                           std::max<uint64_t>(static_cast<uint64_t>(weights.columns),
                                              kCudaTileBytes / sizeof(float))));
    tile = buffers_->tile.reserve(tile_floats);
  }
  cuda::multiply(context_, weights, x, count, y, weights.rows, tile, tile_floats);
}

void CudaBackend::feed_forward(const DeviceMatrix& gate, const DeviceMatrix& up,
                               const DeviceMatrix& down, const float* x, int64_t count,
                               float* out) {
  const int64_t width = gate.rows;
  float* gated = buffers_->gate.reserve(static_cast<size_t>(count * width));
  float* upped = buffers_->up.reserve(static_cast<size_t>(count * width));
  float* activated = buffers_->activated.reserve(static_cast<size_t>(count * width));
  multiply(gate, x, count, gated);
  multiply(up, x, count, upped);
  cuda::gated_activation(context_, model_->config().activation == Activation::gelu_tanh, gated,
                         upped, activated, count * width);
  multiply(down, activated, count, out);
}

// Routing on the host (the router rows come back: experts x tokens floats), each expert over the
// rows that chose it on the device, then every token's experts summed in rank order.
void CudaBackend::mixture_of_experts(const DeviceLayer& layer) {
  const ModelConfig& config = model_->config();
  const int64_t tokens = tokens_, experts = config.experts, used = config.experts_used;
  const int64_t dim = config.dim;
  StepBuffers& work = *buffers_;
  float* router = work.router.reserve(static_cast<size_t>(tokens * experts));
  multiply(layer.router, work.normed.data(), tokens, router);
  router_rows_.resize(static_cast<size_t>(tokens * experts));
  context_.download(router_rows_.data(), router, router_rows_.size() * sizeof(float));
  route_to_experts(config, router_rows_.data(), tokens, chosen_, chosen_weights_);
  // Per expert, its rows' tokens then its slots (token * used + rank), all in one upload.
  std::vector<int32_t> lists;
  std::vector<std::pair<size_t, int64_t>> expert_lists(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    std::vector<int32_t> slots;
    for (int64_t slot = 0; slot < tokens * used; ++slot) {
      if (chosen_[static_cast<size_t>(slot)] == e) slots.push_back(static_cast<int32_t>(slot));
    }
    expert_lists[static_cast<size_t>(e)] = {lists.size(), static_cast<int64_t>(slots.size())};
    for (int32_t slot : slots)
      lists.push_back(static_cast<int32_t>(slot / used));
    lists.insert(lists.end(), slots.begin(), slots.end());
  }
  float* outputs = work.expert_outputs.reserve(static_cast<size_t>(tokens * used * dim));
  float* weights = work.expert_weights.reserve(chosen_weights_.size());
  context_.upload(weights, chosen_weights_.data(), chosen_weights_.size() * sizeof(float));
  DeviceArray<int32_t> device_lists(context_, "expert routing");
  int32_t* device = device_lists.reserve(std::max<size_t>(1, lists.size()));
  context_.upload(device, lists.data(), lists.size() * sizeof(int32_t));
  for (int64_t e = 0; e < experts; ++e) {
    const auto [start, count] = expert_lists[static_cast<size_t>(e)];
    if (count == 0) continue;
    float* inputs = work.expert_inputs.reserve(static_cast<size_t>(count * dim));
    float* results = work.expert_results.reserve(static_cast<size_t>(count * dim));
    cuda::gather_rows(context_, work.normed.data(), device + start, count, dim, inputs);
    feed_forward(layer.expert_gate[static_cast<size_t>(e)], layer.expert_up[static_cast<size_t>(e)],
                 layer.expert_down[static_cast<size_t>(e)], inputs, count, results);
    cuda::scatter_rows(context_, results, device + start + count, count, dim, outputs);
  }
  float* shared = nullptr;
  if (config.shared_expert_ffn > 0) {
    shared = work.shared_expert.reserve(static_cast<size_t>(tokens * dim));
    feed_forward(layer.gate, layer.up, layer.down, work.normed.data(), tokens, shared);
  }
  cuda::combine_experts(context_, outputs, weights, tokens, used, dim, shared,
                        layer.shared_expert_gate, work.normed.data(), work.projected.data());
  context_.synchronize();  // device_lists is freed on return
}

void CudaBackend::run_layer(int64_t index) {
  const ModelConfig& config = model_->config();
  const DeviceLayer& layer = layers_[static_cast<size_t>(index)];
  StepBuffers& work = *buffers_;
  const int64_t tokens = tokens_, dim = config.dim, head_dim = config.head_dim;
  const int64_t q_dim = config.heads * head_dim, kv_dim = config.kv_heads * head_dim;
  float *hidden = work.hidden.data(), *normed = work.normed.data(), *query = work.query.data(),
        *key = work.key.data(), *value = work.value.data(), *projected = work.projected.data();
  cuda::rms_norm_rows(context_, hidden, layer.attention_norm, normed, tokens, dim,
                      config.rms_epsilon);
  multiply(layer.query, normed, tokens, query);
  multiply(layer.key, normed, tokens, key);
  multiply(layer.value, normed, tokens, value);
  if (config.attention_bias) {
    cuda::add_bias_rows(context_, query, layer.query_bias, q_dim, tokens);
    cuda::add_bias_rows(context_, key, layer.key_bias, kv_dim, tokens);
    cuda::add_bias_rows(context_, value, layer.value_bias, kv_dim, tokens);
  }
  if (config.query_key_norm) {
    cuda::rms_norm_rows(context_, query, layer.query_norm, query, tokens * config.heads, head_dim,
                        config.rms_epsilon);
    cuda::rms_norm_rows(context_, key, layer.key_norm, key, tokens * config.kv_heads, head_dim,
                        config.rms_epsilon);
  }
  const int64_t pairs = config.rope_dimensions / 2;
  const int table = config.sliding_rope_differs && config.sliding_layer(index) ? 1 : 0;
  const float* cosines = work.rope.data() + table * 2 * tokens * pairs;
  const float* sines = cosines + tokens * pairs;
  const bool adjacent = config.rope_style == RopeStyle::adjacent_pairs;
  cuda::rope_rows(context_, query, tokens, config.heads, head_dim, cosines, sines, pairs, adjacent);
  cuda::rope_rows(context_, key, tokens, config.kv_heads, head_dim, cosines, sines, pairs,
                  adjacent);
  const cuda::StepPositions& where =
      config.sliding_layer(index) ? sliding_attention_ : full_attention_;
  cuda::store_keys_and_values(context_, kv_layout_, pool_, where, tokens, index, key, value);
  cuda::attention(context_, kv_layout_, pool_, where, tokens, index, config.heads,
                  config.attention_scale, config.attention_softcap, query, work.attended.data());
  multiply(layer.output, work.attended.data(), tokens, projected);
  if (layer.output_bias != nullptr)
    cuda::add_bias_rows(context_, projected, layer.output_bias, dim, tokens);
  if (config.post_norms) {
    cuda::rms_norm_rows(context_, projected, layer.attention_post_norm, projected, tokens, dim,
                        config.rms_epsilon);
  }
  cuda::add(context_, hidden, projected, tokens * dim);
  cuda::rms_norm_rows(context_, hidden, layer.ffn_norm, normed, tokens, dim, config.rms_epsilon);
  if (config.experts > 0) {
    mixture_of_experts(layer);
  } else {
    feed_forward(layer.gate, layer.up, layer.down, normed, tokens, projected);
  }
  if (config.post_norms) {
    cuda::rms_norm_rows(context_, projected, layer.ffn_post_norm, projected, tokens, dim,
                        config.rms_epsilon);
  }
  cuda::add(context_, hidden, projected, tokens * dim);
}

void CudaBackend::final_logits() {
  const ModelConfig& config = model_->config();
  StepBuffers& work = *buffers_;
  const auto rows = static_cast<int64_t>(layout_.logit_tokens.size());
  if (rows == 0) return;
  float* final_rows = work.final_rows.reserve(static_cast<size_t>(rows * config.dim));
  cuda::gather_rows(context_, work.hidden.data(), logit_token_ids_, rows, config.dim, final_rows);
  cuda::rms_norm_rows(context_, final_rows, output_norm_, final_rows, rows, config.dim,
                      config.rms_epsilon);
  float* logits = work.logits.reserve(static_cast<size_t>(rows * config.vocabulary));
  multiply(output_, final_rows, rows, logits);
  if (config.final_softcap > 0)
    cuda::soft_cap(context_, logits, rows * config.vocabulary, config.final_softcap);
}

void CudaBackend::forward(std::span<const StepChunk> chunks, StepOutput& out) {
  if (pool_ == nullptr) throw std::logic_error("a step before the KV pool was allocated");
  const ModelConfig& config = model_->config();
  check_step_chunks(config, kv_layout_.block_tokens, chunks);
  // A block outside the pool would be an illegal address on the device, which ends the CUDA
  // context for good: refused here, as the contract's block-table errors are.
  for (const StepChunk& chunk : chunks) {
    for (BlockId block : chunk.block_table) {
      if (block < 0 || block >= pool_blocks_)
        throw std::logic_error("KV block " + std::to_string(block) + " is not in the pool of " +
                               std::to_string(pool_blocks_) + " blocks");
    }
  }
  out.logits.clear();
  out.tokens.clear();
  lay_out_step(chunks, layout_);
  const auto real_tokens = static_cast<int64_t>(layout_.positions.size());
  if (real_tokens == 0) return;
  const int64_t bucket = use_graphs_ && replays_decode_graph(config, chunks)
                             ? decode_graph_bucket(graph_buckets_, real_tokens)
                             : 0;
  padding_ = bucket > 0 ? bucket - real_tokens : 0;
  for (int64_t p = 0; p < padding_; ++p) {
    layout_.positions.push_back(0);
    layout_.chunk_of_token.push_back(-1);
    layout_.logit_tokens.push_back(real_tokens + p);
    ++layout_.token_rows;
  }
  tokens_ = real_tokens + padding_;
  const int64_t tokens = tokens_;
  const int64_t q_dim = config.heads * config.head_dim, kv_dim = config.kv_heads * config.head_dim;
  StepBuffers& work = *buffers_;
  for (auto [buffer, width] : std::initializer_list<std::pair<DeviceArray<float>*, int64_t>>{
           {&work.hidden, config.dim},
           {&work.normed, config.dim},
           {&work.query, q_dim},
           {&work.key, kv_dim},
           {&work.value, kv_dim},
           {&work.attended, q_dim},
           {&work.projected, config.dim}})
    buffer->reserve(static_cast<size_t>(tokens * width));
  if (bucket > 0) {
    // Room for the longest block tables, so that the index array never moves under a graph.
    const int64_t table_blocks =
        (config.context + kv_layout_.block_tokens - 1) / kv_layout_.block_tokens;
    work.indices.reserve(static_cast<size_t>(bucket * (8 + table_blocks) + 1));
  }
  upload_step(chunks);
  // Both rotation tables (full and sliding layers), each cosines then sines.
  const int64_t pairs = config.rope_dimensions / 2;
  std::vector<float> angles(static_cast<size_t>(2 * 2 * tokens * pairs));
  for (int table = 0; table < (config.sliding_rope_differs ? 2 : 1); ++table) {
    float* cosines = angles.data() + table * 2 * tokens * pairs;
    rope_angles(config, table == 0 ? config.rope : config.sliding_rope, layout_.positions, cosines,
                cosines + tokens * pairs);
  }
  context_.upload(work.rope.reserve(angles.size()), angles.data(), angles.size() * sizeof(float));
  if (bucket > 0) {
    run_as_graph(bucket);
  } else {
    run_step_body();
  }
  const auto vocabulary = static_cast<size_t>(config.vocabulary);
  const size_t logits_rows = layout_.logit_tokens.size() - static_cast<size_t>(layout_.token_rows);
  out.logits.resize(logits_rows * vocabulary);
  if (logits_rows > 0)
    context_.download(out.logits.data(), work.logits.data(), out.logits.size() * sizeof(float));
  draw_tokens(chunks, logits_rows, out.tokens);
}

void CudaBackend::run_step_body() {
  const ModelConfig& config = model_->config();
  cuda::embed_tokens(context_, token_embedding_, token_ids_, tokens_, config.embedding_scale,
                     buffers_->hidden.data());
  for (int64_t layer = 0; layer < config.layers; ++layer)
    run_layer(layer);
  final_logits();
}

void CudaBackend::run_as_graph(int64_t bucket) {
  const std::vector<const void*> addresses = buffers_->addresses();
  auto captured = std::find_if(graphs_.begin(), graphs_.end(),
                               [&](const CapturedStep& step) { return step.bucket == bucket; });
  if (captured != graphs_.end() && captured->addresses == addresses) {
    context_.launch_graph(captured->graph);
    return;
  }
  if (captured != graphs_.end()) {  // a larger step moved a buffer since
    context_.destroy_graph(captured->graph);
    graphs_.erase(captured);
  }
  run_step_body();  // this step's results, and every buffer sized for the bucket
  try {
    context_.begin_capture();
    run_step_body();
    graphs_.push_back({bucket, context_.end_capture(), buffers_->addresses()});
  } catch (const std::exception& error) {
    context_.abandon_capture();
    use_graphs_ = false;
    std::clog << "chatflow: the CUDA backend could not capture a decode step as a CUDA graph ("
              << error.what() << "): it launches each kernel from now on\n";
  }
}

// Greedy draws happen on the device (draw_greedy: only the tokens come back); a sampled draw's
// row comes back and is drawn on the host by sample_token, as the CPU backend draws it.
void CudaBackend::draw_tokens(std::span<const StepChunk> chunks, size_t first_row,
                              std::vector<SampledToken>& tokens) {
  const int64_t vocabulary = model_->config().vocabulary;
  StepBuffers& work = *buffers_;
  std::vector<cuda::GreedyDraw> draws;
  std::vector<uint64_t> masks;
  std::vector<int32_t> penalty_tokens, penalty_counts;
  std::vector<size_t> drawn_at;  // each token chunk's place in `draws`, or SIZE_MAX
  size_t row = first_row;
  for (const StepChunk& chunk : chunks) {
    if (chunk.want != StepChunk::Want::token || chunk.tokens.empty()) continue;
    const SamplingParams& params = *chunk.draw.params;
    if (params.temperature > 0.0f) {
      drawn_at.push_back(SIZE_MAX);
      ++row;
      continue;
    }
    cuda::GreedyDraw draw;
    draw.row = static_cast<int32_t>(row++);
    if (!chunk.draw.allowed.empty()) {
      draw.mask_offset = static_cast<int32_t>(masks.size());
      draw.mask_words = static_cast<int32_t>(chunk.draw.allowed.size());
      masks.insert(masks.end(), chunk.draw.allowed.begin(), chunk.draw.allowed.end());
    }
    if (params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
        params.frequency_penalty != 0.0f) {
      std::span<const TokenId> history = chunk.draw.history;
      if (params.penalty_window > 0 && history.size() > static_cast<size_t>(params.penalty_window))
        history = history.last(static_cast<size_t>(params.penalty_window));
      std::map<TokenId, int32_t> counts;
      for (TokenId token : history)
        ++counts[token];
      draw.penalty_offset = static_cast<int32_t>(penalty_tokens.size());
      draw.penalty_count = static_cast<int32_t>(counts.size());
      for (const auto& [token, count] : counts) {
        penalty_tokens.push_back(token);
        penalty_counts.push_back(count);
      }
      draw.repetition_penalty = params.repetition_penalty;
      draw.presence_penalty = params.presence_penalty;
      draw.frequency_penalty = params.frequency_penalty;
    }
    draw.top_logprobs = std::min(params.top_logprobs, cuda::kMaxTopLogprobs);
    draw.want_logprobs = params.logprobs || params.top_logprobs > 0;
    drawn_at.push_back(draws.size());
    draws.push_back(draw);
  }
  std::vector<cuda::DrawnToken> drawn(draws.size());
  if (!draws.empty()) {
    auto place = [&](auto& array, const auto& values) {
      auto* device = array.reserve(std::max<size_t>(1, values.size()));
      if (!values.empty())
        context_.upload(device, values.data(), values.size() * sizeof(values[0]));
      return device;
    };
    place(work.draws, draws);
    place(work.masks, masks);
    place(work.penalty_tokens, penalty_tokens);
    place(work.penalty_counts, penalty_counts);
    cuda::draw_greedy(context_, work.logits.data(), vocabulary, work.draws.data(),
                      static_cast<int64_t>(draws.size()), work.masks.data(),
                      work.penalty_tokens.data(), work.penalty_counts.data(),
                      work.penalty_raw.reserve(std::max<size_t>(1, penalty_tokens.size())),
                      work.drawn.reserve(draws.size()));
    context_.download(drawn.data(), work.drawn.data(), drawn.size() * sizeof(drawn[0]));
  }
  row = first_row;
  size_t index = 0;
  for (const StepChunk& chunk : chunks) {
    if (chunk.want != StepChunk::Want::token || chunk.tokens.empty()) continue;
    const size_t at = drawn_at[index++];
    if (at != SIZE_MAX) {
      const cuda::DrawnToken& token = drawn[at];
      SampledToken sampled;
      sampled.token = token.token;
      sampled.logprob = token.logprob;
      for (int32_t k = 0; k < token.top_count; ++k)
        sampled.top.push_back({token.top_tokens[k], token.top_logprobs[k]});
      tokens.push_back(std::move(sampled));
    } else {
      host_logits_.resize(static_cast<size_t>(vocabulary));
      context_.download(host_logits_.data(),
                        work.logits.data() + row * static_cast<size_t>(vocabulary),
                        host_logits_.size() * sizeof(float));
      std::span<float> logits(host_logits_);
      apply_allowed_tokens(chunk.draw.allowed, logits);
      tokens.push_back(sample_token(*chunk.draw.params, logits, chunk.draw.history,
                                    chunk.draw.uniform, sampling_));
    }
    ++row;
  }
}

}  // namespace

std::optional<std::string> cuda_device_missing() {
  const kernels::cuda::DeviceProbe probe = kernels::cuda::probe_devices();
  if (probe.devices > 0) return std::nullopt;
  return "no CUDA device is visible here (" + probe.why_none + ")";
}

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Model> model,
                                           const BackendOptions& options) {
  if (auto missing = cuda_device_missing()) throw BackendUnavailable(*missing);
  try {
    return std::make_unique<CudaBackend>(std::move(model), options);
  } catch (const kernels::cuda::DeviceError& error) {
    throw BackendUnavailable(std::string("the CUDA backend cannot start: ") + error.what());
  }
}

}  // namespace chatflow::engine
