#include "architecture_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/half.h"
#include "kernels/quantize.h"

namespace chatflow::testing {
namespace {

using Vector = std::vector<double>;

// The input of a product with quantised weights as the engine specifies it: each block of the
// weights' block size as int8 levels, rounded half to even from x * 127 / amax in float, times
// the block's scale (amax / 127 as an f16 for blocks of 32, 1 / (127 / amax) for 256).
struct RoundedInput {
  Vector values;
  // Per block of 32: what the engine multiplies a weight block's offset by (llama.cpp's q8_1
  // sum: amax / 127 times the sum of the levels, as an f16) minus the block's sum of `values`.
  Vector offset_sum_error;
};

RoundedInput rounded_to_8_bits(const Vector& x, int64_t block) {
  RoundedInput out{Vector(x.size()), {}};
  for (size_t start = 0; start < x.size(); start += static_cast<size_t>(block)) {
    float amax = 0;
    for (int64_t i = 0; i < block; ++i)
      amax = std::max(amax, std::fabs(static_cast<float>(x[start + static_cast<size_t>(i)])));
    float inverse = amax > 0 ? 127.0f / amax : 0.0f;
    auto as_half = [](float value) { return kernels::f16_to_f32(kernels::f32_to_f16(value)); };
    float scale = block == kernels::kQuantBlock ? as_half(amax / 127.0f)
                  : amax > 0                    ? 1.0f / inverse
                                                : 0.0f;
    double level_sum = 0;
    for (int64_t i = 0; i < block; ++i) {
      size_t at = start + static_cast<size_t>(i);
      double level = std::nearbyint(static_cast<float>(x[at]) * inverse);
      level_sum += level;
      out.values[at] = level * static_cast<double>(scale);
    }
    if (block == kernels::kQuantBlock) {
      out.offset_sum_error.push_back(
          static_cast<double>(as_half(amax / 127.0f * static_cast<float>(level_sum))) -
          static_cast<double>(scale) * level_sum);
    }
  }
  return out;
}

struct Matrix {
  int64_t rows = 0, columns = 0;
  std::vector<double> values;                           // row-major, dequantised
  kernels::TensorType type = kernels::TensorType::f32;  // as stored
  // Formats whose blocks of 32 add an offset to every weight (q4_1, q5_1): each block's offset,
  // [rows][columns / 32]. Empty for the others.
  std::vector<double> block_offsets;
  Vector times(const Vector& input) const {
    if (!kernels::is_quantized(type)) return times_exactly(input);
    const RoundedInput x = rounded_to_8_bits(input, kernels::block_values(type));
    Vector y = times_exactly(x.values);
    if (!block_offsets.empty()) {
      const int64_t blocks = columns / kernels::kQuantBlock;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < blocks; ++b)
          y[static_cast<size_t>(r)] += block_offsets[static_cast<size_t>(r * blocks + b)] *
                                       x.offset_sum_error[static_cast<size_t>(b)];
      }
    }
    return y;
  }
  Vector times_exactly(const Vector& x) const {
    Vector y(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < columns; ++c)
        sum += values[static_cast<size_t>(r * columns + c)] * x[static_cast<size_t>(c)];
      y[static_cast<size_t>(r)] = sum;
    }
    return y;
  }
  Matrix rows_from(int64_t first, int64_t count) const {
    Matrix part{count, columns, {}, type, {}};
    part.values.assign(values.begin() + first * columns,
                       values.begin() + (first + count) * columns);
    if (!block_offsets.empty()) {
      const int64_t blocks = columns / kernels::kQuantBlock;
      part.block_offsets.assign(block_offsets.begin() + first * blocks,
                                block_offsets.begin() + (first + count) * blocks);
    }
    return part;
  }
};

Vector rms_norm(const Vector& x, const Vector& weight, double epsilon) {
  double squares = 0;
  for (double value : x)
    squares += value * value;
  double scale = 1.0 / std::sqrt(squares / static_cast<double>(x.size()) + epsilon);
  Vector out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = x[i] * scale * weight[i];
  return out;
}

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / 3.141592653589793) * (x + 0.044715 * x * x * x)));
}

double silu(double x) {
  return x / (1 + std::exp(-x));
}

// Inverse frequencies and the cos/sin magnitude of one rope, per pair.
struct Rope {
  Vector inverse_frequency;
  double position_scale = 1;
  double magnitude = 1;
};

}  // namespace

struct ArchitectureReference::State {
  std::shared_ptr<const engine::GgufFile> file;
  std::string arch;
  int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, context = 0;
  int64_t rope_dims = 0, window = 0;
  double epsilon = 0, attention_cap = 0, final_cap = 0;
  bool adjacent_pairs = false;
  Rope global_rope, local_rope;
  Matrix embedding, output;
  Vector output_norm;
  struct Layer {
    Matrix q, k, v, o, gate, up, down;
    Vector o_bias;
    Vector attention_norm, ffn_norm, q_bias, k_bias, v_bias, q_norm, k_norm, post_attention,
        post_ffn;
    bool sliding = false;
    // Mixture of experts (Mixtral, Qwen2-MoE): the router, the experts, the shared expert.
    Matrix router;
    std::vector<Matrix> expert_gate, expert_up, expert_down;
    Vector shared_gate;
  };
  int64_t experts = 0, experts_used = 0;
  std::vector<Layer> blocks;
  std::vector<std::vector<Vector>> keys, values;  // [layer][position]
  int64_t position = 0;

  std::string key(const std::string& name) const { return arch + "." + name; }

  Vector vector(const std::string& name) const {
    const engine::GgufTensorInfo* tensor = file->find_tensor(name);
    if (tensor == nullptr) throw std::runtime_error("reference: no tensor " + name);
    if (tensor->type != kernels::TensorType::f32)
      throw std::runtime_error("reference: " + name + " is not f32");
    size_t count = 1;
    for (int64_t extent : tensor->shape)
      count *= static_cast<size_t>(extent);
    std::vector<float> floats(count);
    std::memcpy(floats.data(), tensor->data, count * sizeof(float));
    return Vector(floats.begin(), floats.end());
  }
  // A weight tensor of any computable type, dequantised row by row (rows of shape[0] values;
  // an expert tensor's experts one after another).
  Matrix matrix(const std::string& name) const {
    const engine::GgufTensorInfo* tensor = file->find_tensor(name);
    if (tensor == nullptr) throw std::runtime_error("reference: no tensor " + name);
    if (!kernels::computable(tensor->type))
      throw std::runtime_error("reference: " + name + " has a type the engine cannot compute");
    const int64_t columns = tensor->shape[0];
    int64_t rows = 1;
    for (size_t i = 1; i < tensor->shape.size(); ++i)
      rows *= tensor->shape[i];
    const size_t row_bytes = kernels::row_bytes(tensor->type, columns);
    Matrix matrix{
        rows, columns, std::vector<double>(static_cast<size_t>(rows * columns)), tensor->type, {}};
    std::vector<float> row(static_cast<size_t>(columns));
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* bytes = tensor->data + static_cast<size_t>(r) * row_bytes;
      kernels::dequantize_row(tensor->type, bytes, columns, row.data());
      std::copy(row.begin(), row.end(), matrix.values.begin() + r * columns);
      // ggml's q4_1 and q5_1 blocks start with two f16s: the scale, then the offset.
      if (tensor->type == kernels::TensorType::q4_1 || tensor->type == kernels::TensorType::q5_1) {
        const size_t block_bytes = kernels::block_bytes(tensor->type);
        for (int64_t b = 0; b < columns / kernels::kQuantBlock; ++b) {
          uint16_t offset;
          std::memcpy(&offset, bytes + static_cast<size_t>(b) * block_bytes + 2, 2);
          matrix.block_offsets.push_back(kernels::f16_to_f32(offset));
        }
      }
    }
    return matrix;
  }
  bool has(const std::string& name) const { return file->find_tensor(name) != nullptr; }

  Rope make_rope(double base, bool scaled) const {
    Rope rope;
    const int64_t pairs = rope_dims / 2;
    for (int64_t i = 0; i < pairs; ++i)
      rope.inverse_frequency.push_back(
          std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rope_dims)));
    if (!scaled) return rope;
    std::string type = file->get_string_or(key("rope.scaling.type")).value_or("none");
    double factor = file->get_float_or(key("rope.scaling.factor")).value_or(0.0);
    double original =
        static_cast<double>(file->get_unsigned_or(key("rope.scaling.original_context_length"))
                                .value_or(static_cast<uint64_t>(context)));
    rope.magnitude = file->get_float_or(key("rope.scaling.attn_factor")).value_or(1.0);
    if (type == "linear") {
      rope.position_scale = 1 / factor;
    } else if (type == "yarn") {
      // YaRN (transformers' _compute_yarn_parameters): interpolate the low frequencies by the
      // factor, keep the high ones, ramp between, and scale the magnitude by 0.1 ln(factor) + 1.
      auto correction = [&](double rotations) {
        return static_cast<double>(rope_dims) *
               std::log(original / (rotations * 2 * 3.141592653589793)) / (2 * std::log(base));
      };
      double low = std::max(0.0, std::floor(correction(32)));
      double high = std::min(static_cast<double>(rope_dims - 1), std::ceil(correction(1)));
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < pairs; ++i) {
        double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        double extrapolation = 1 - ramp;
        double f = rope.inverse_frequency[static_cast<size_t>(i)];
        rope.inverse_frequency[static_cast<size_t>(i)] =
            f / factor * (1 - extrapolation) + f * extrapolation;
      }
      rope.magnitude *= 0.1 * std::log(factor) + 1;
    } else if (type != "none") {
      throw std::runtime_error("reference: rope scaling " + type);
    }
    // Llama 3's factors and Phi-3's LongRoPE divide the frequencies pair by pair.
    std::string factors_name = "rope_freqs.weight";
    if (arch == "phi3") {
      factors_name = static_cast<double>(context) > original ? "rope_factors_long.weight"
                                                             : "rope_factors_short.weight";
    }
    if (has(factors_name)) {
      Vector factors = vector(factors_name);
      for (int64_t i = 0; i < pairs; ++i)
        rope.inverse_frequency[static_cast<size_t>(i)] /= factors[static_cast<size_t>(i)];
    }
    return rope;
  }

  void rotate(double* head, const Rope& rope) const {
    const int64_t pairs = rope_dims / 2;
    for (int64_t i = 0; i < pairs; ++i) {
      double angle = static_cast<double>(position) * rope.position_scale *
                     rope.inverse_frequency[static_cast<size_t>(i)];
      double c = std::cos(angle) * rope.magnitude, s = std::sin(angle) * rope.magnitude;
      int64_t a = adjacent_pairs ? 2 * i : i, b = adjacent_pairs ? 2 * i + 1 : i + pairs;
      double x0 = head[a], x1 = head[b];
      head[a] = x0 * c - x1 * s;
      head[b] = x0 * s + x1 * c;
    }
  }
};

ArchitectureReference::ArchitectureReference(const std::string& path)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.file = engine::GgufFile::open(path);
  const engine::GgufFile& f = *s.file;
  s.arch = f.get_string("general.architecture");
  const std::string& arch = s.arch;
  if (arch != "llama" && arch != "qwen2" && arch != "qwen2moe" && arch != "qwen3" &&
      arch != "qwen3moe" && arch != "gemma2" && arch != "gemma3" && arch != "phi3") {
    throw std::runtime_error("reference: architecture " + arch);
  }
  s.dim = static_cast<int64_t>(f.get_unsigned(s.key("embedding_length")));
  s.layers = static_cast<int64_t>(f.get_unsigned(s.key("block_count")));
  s.heads = static_cast<int64_t>(f.get_unsigned(s.key("attention.head_count")));
  s.kv_heads = static_cast<int64_t>(f.get_unsigned(s.key("attention.head_count_kv")));
  s.head_dim = s.dim / s.heads;
  s.ffn = static_cast<int64_t>(f.get_unsigned(s.key("feed_forward_length")));
  s.context = static_cast<int64_t>(f.get_unsigned(s.key("context_length")));
  s.rope_dims = static_cast<int64_t>(
      f.get_unsigned_or(s.key("rope.dimension_count")).value_or(static_cast<uint64_t>(s.head_dim)));
  s.epsilon = f.get_float(s.key("attention.layer_norm_rms_epsilon"));
  s.window = static_cast<int64_t>(f.get_unsigned_or(s.key("attention.sliding_window")).value_or(0));
  s.adjacent_pairs = arch == "llama";
  s.experts = static_cast<int64_t>(f.get_unsigned_or(s.key("expert_count")).value_or(0));
  s.experts_used = static_cast<int64_t>(f.get_unsigned_or(s.key("expert_used_count")).value_or(0));
  const bool gemma = arch == "gemma2" || arch == "gemma3";
  if (arch == "gemma2") {
    s.attention_cap = f.get_float(s.key("attn_logit_softcapping"));
    s.final_cap = f.get_float(s.key("final_logit_softcapping"));
  }
  double base = f.get_float_or(s.key("rope.freq_base")).value_or(10000.0);
  s.global_rope = s.make_rope(base, true);
  // Gemma 3's local layers: base 10000, unscaled.
  s.local_rope = arch == "gemma3" ? s.make_rope(10000.0, false) : s.global_rope;

  s.embedding = s.matrix("token_embd.weight");
  s.output = s.has("output.weight") ? s.matrix("output.weight") : s.embedding;
  s.output_norm = s.vector("output_norm.weight");
  const int64_t q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
  for (int64_t l = 0; l < s.layers; ++l) {
    std::string p = "blk." + std::to_string(l) + ".";
    State::Layer layer;
    layer.attention_norm = s.vector(p + "attn_norm.weight");
    layer.ffn_norm = s.vector(p + "ffn_norm.weight");
    if (s.experts > 0) {
      layer.q = s.matrix(p + "attn_q.weight");
      layer.k = s.matrix(p + "attn_k.weight");
      layer.v = s.matrix(p + "attn_v.weight");
      layer.router = s.matrix(p + "ffn_gate_inp.weight");
      auto split = [&](const std::string& name) {
        const engine::GgufTensorInfo* tensor = s.file->find_tensor(name);
        Matrix all = s.matrix(name);
        std::vector<Matrix> each;
        for (int64_t e = 0; e < tensor->shape[2]; ++e)
          each.push_back(all.rows_from(e * tensor->shape[1], tensor->shape[1]));
        return each;
      };
      layer.expert_gate = split(p + "ffn_gate_exps.weight");
      layer.expert_up = split(p + "ffn_up_exps.weight");
      layer.expert_down = split(p + "ffn_down_exps.weight");
      if (arch == "qwen2moe") {
        layer.gate = s.matrix(p + "ffn_gate_shexp.weight");
        layer.up = s.matrix(p + "ffn_up_shexp.weight");
        layer.down = s.matrix(p + "ffn_down_shexp.weight");
        layer.shared_gate = s.vector(p + "ffn_gate_inp_shexp.weight");
      }
    } else if (arch == "phi3") {
      Matrix qkv = s.matrix(p + "attn_qkv.weight");
      layer.q = qkv.rows_from(0, q_dim);
      layer.k = qkv.rows_from(q_dim, kv_dim);
      layer.v = qkv.rows_from(q_dim + kv_dim, kv_dim);
      Matrix gate_up = s.matrix(p + "ffn_up.weight");
      layer.gate = gate_up.rows_from(0, s.ffn);
      layer.up = gate_up.rows_from(s.ffn, s.ffn);
    } else {
      layer.q = s.matrix(p + "attn_q.weight");
      layer.k = s.matrix(p + "attn_k.weight");
      layer.v = s.matrix(p + "attn_v.weight");
      layer.gate = s.matrix(p + "ffn_gate.weight");
      layer.up = s.matrix(p + "ffn_up.weight");
    }
    layer.o = s.matrix(p + "attn_output.weight");
    if (s.experts == 0) layer.down = s.matrix(p + "ffn_down.weight");
    if (s.has(p + "attn_output.bias")) layer.o_bias = s.vector(p + "attn_output.bias");
    if (arch == "qwen2" || arch == "qwen2moe" || s.has(p + "attn_q.bias")) {
      layer.q_bias = s.vector(p + "attn_q.bias");
      layer.k_bias = s.vector(p + "attn_k.bias");
      layer.v_bias = s.vector(p + "attn_v.bias");
    }
    if (arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3") {
      layer.q_norm = s.vector(p + "attn_q_norm.weight");
      layer.k_norm = s.vector(p + "attn_k_norm.weight");
    }
    if (gemma) {
      layer.post_attention = s.vector(p + "post_attention_norm.weight");
      layer.post_ffn = s.vector(p + "post_ffw_norm.weight");
    }
    if (s.window > 0) {
      if (arch == "gemma2") {
        layer.sliding = l % 2 == 0;
      } else if (arch == "gemma3") {
        layer.sliding = (l + 1) % 6 != 0;
      } else {
        layer.sliding = true;
      }
    }
    s.blocks.push_back(std::move(layer));
  }
  s.keys.resize(static_cast<size_t>(s.layers));
  s.values.resize(static_cast<size_t>(s.layers));
}

ArchitectureReference::~ArchitectureReference() = default;

std::vector<double> ArchitectureReference::step(int32_t token) {
  State& s = *state_;
  const bool gemma = s.arch == "gemma2" || s.arch == "gemma3";
  const int64_t hd = s.head_dim;
  Vector x(s.embedding.values.begin() + token * s.dim,
           s.embedding.values.begin() + (token + 1) * s.dim);
  if (gemma) {
    for (double& value : x)
      value *= std::sqrt(static_cast<double>(s.dim));
  }
  auto add = [](Vector& y, const Vector& b) {
    for (size_t i = 0; i < y.size(); ++i)
      y[i] += b[i];
  };
  for (int64_t l = 0; l < s.layers; ++l) {
    const State::Layer& layer = s.blocks[static_cast<size_t>(l)];
    Vector h = rms_norm(x, layer.attention_norm, s.epsilon);
    Vector q = layer.q.times(h), k = layer.k.times(h), v = layer.v.times(h);
    if (!layer.q_bias.empty()) {
      add(q, layer.q_bias);
      add(k, layer.k_bias);
      add(v, layer.v_bias);
    }
    auto norm_heads = [&](Vector& rows, const Vector& weight) {
      for (size_t head = 0; head * hd < rows.size(); ++head) {
        Vector one(rows.begin() + static_cast<int64_t>(head) * hd,
                   rows.begin() + static_cast<int64_t>(head + 1) * hd);
        one = rms_norm(one, weight, s.epsilon);
        std::copy(one.begin(), one.end(), rows.begin() + static_cast<int64_t>(head) * hd);
      }
    };
    if (!layer.q_norm.empty()) {
      norm_heads(q, layer.q_norm);
      norm_heads(k, layer.k_norm);
    }
    const Rope& rope = layer.sliding ? s.local_rope : s.global_rope;
    for (int64_t head = 0; head < s.heads; ++head)
      s.rotate(q.data() + head * hd, rope);
    for (int64_t head = 0; head < s.kv_heads; ++head)
      s.rotate(k.data() + head * hd, rope);
    s.keys[static_cast<size_t>(l)].push_back(k);
    s.values[static_cast<size_t>(l)].push_back(v);

    const auto& keys = s.keys[static_cast<size_t>(l)];
    const auto& values = s.values[static_cast<size_t>(l)];
    const int64_t first = layer.sliding ? std::max<int64_t>(0, s.position + 1 - s.window) : 0;
    const int64_t group = s.heads / s.kv_heads;
    Vector attended(static_cast<size_t>(s.heads * hd), 0.0);
    for (int64_t head = 0; head < s.heads; ++head) {
      const int64_t kv = head / group;
      std::vector<double> scores;
      for (int64_t p = first; p <= s.position; ++p) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d)
          dot += q[static_cast<size_t>(head * hd + d)] *
                 keys[static_cast<size_t>(p)][static_cast<size_t>(kv * hd + d)];
        dot /= std::sqrt(static_cast<double>(hd));
        if (s.attention_cap > 0) dot = s.attention_cap * std::tanh(dot / s.attention_cap);
        scores.push_back(dot);
      }
      double largest = *std::max_element(scores.begin(), scores.end());
      double total = 0;
      for (double& score : scores)
        total += (score = std::exp(score - largest));
      for (int64_t p = first; p <= s.position; ++p) {
        double weight = scores[static_cast<size_t>(p - first)] / total;
        for (int64_t d = 0; d < hd; ++d)
          attended[static_cast<size_t>(head * hd + d)] +=
              weight * values[static_cast<size_t>(p)][static_cast<size_t>(kv * hd + d)];
      }
    }
    Vector projected = layer.o.times(attended);
    if (!layer.o_bias.empty()) add(projected, layer.o_bias);
    if (gemma) projected = rms_norm(projected, layer.post_attention, s.epsilon);
    add(x, projected);

    h = rms_norm(x, layer.ffn_norm, s.epsilon);
    auto network = [&](const Matrix& gate_matrix, const Matrix& up_matrix,
                       const Matrix& down_matrix) {
      Vector gate = gate_matrix.times(h), up = up_matrix.times(h);
      for (size_t i = 0; i < gate.size(); ++i)
        gate[i] = (gemma ? gelu_tanh(gate[i]) : silu(gate[i])) * up[i];
      return down_matrix.times(gate);
    };
    Vector down;
    if (s.experts > 0) {
      // Softmax over the router's logits, the top experts_used, their probabilities as weights
      // (Mixtral renormalises them to sum to one; Qwen2-MoE does not).
      Vector probabilities = layer.router.times(h);
      double largest = *std::max_element(probabilities.begin(), probabilities.end()), total = 0;
      for (double& p : probabilities)
        total += (p = std::exp(p - largest));
      for (double& p : probabilities)
        p /= total;
      std::vector<size_t> order(probabilities.size());
      for (size_t e = 0; e < order.size(); ++e)
        order[e] = e;
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return probabilities[a] > probabilities[b]; });
      double chosen = 0;
      for (int64_t k = 0; k < s.experts_used; ++k)
        chosen += probabilities[order[static_cast<size_t>(k)]];
      down.assign(static_cast<size_t>(s.dim), 0.0);
      for (int64_t k = 0; k < s.experts_used; ++k) {
        size_t e = order[static_cast<size_t>(k)];
        double weight = probabilities[e] / (s.arch == "qwen2moe" ? 1.0 : chosen);
        Vector out = network(layer.expert_gate[e], layer.expert_up[e], layer.expert_down[e]);
        for (size_t i = 0; i < out.size(); ++i)
          down[i] += weight * out[i];
      }
      if (!layer.shared_gate.empty()) {
        double gate = 0;
        for (size_t i = 0; i < h.size(); ++i)
          gate += layer.shared_gate[i] * h[i];
        gate = 1 / (1 + std::exp(-gate));
        Vector out = network(layer.gate, layer.up, layer.down);
        for (size_t i = 0; i < out.size(); ++i)
          down[i] += gate * out[i];
      }
    } else {
      down = network(layer.gate, layer.up, layer.down);
    }
    if (gemma) down = rms_norm(down, layer.post_ffn, s.epsilon);
    add(x, down);
  }
  ++s.position;
  Vector logits = s.output.times(rms_norm(x, s.output_norm, s.epsilon));
  if (s.final_cap > 0) {
    for (double& logit : logits)
      logit = s.final_cap * std::tanh(logit / s.final_cap);
  }
  return logits;
}

}  // namespace chatflow::testing
