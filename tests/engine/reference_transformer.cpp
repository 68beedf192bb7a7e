#include "reference_transformer.h"

#include <algorithm>
#include <cmath>

#include "kernels/half.h"

namespace chatflow::testing {
namespace {

std::vector<float> dequantize(const engine::WeightMatrix& matrix) {
  std::vector<float> values(static_cast<size_t>(matrix.rows * matrix.columns));
  for (int64_t r = 0; r < matrix.rows; ++r)
    engine::dequantize_row(matrix, r, values.data() + r * matrix.columns);
  return values;
}

// Each block of x as int8 levels rounded half to even from x * 127 / amax, times the block's
// scale: amax / 127 as an f16 for blocks of 32, 1 / (127 / amax) for 256 (llama.cpp's).
std::vector<float> rounded_to_8_bits(const std::vector<float>& x, int64_t block) {
  std::vector<float> out(x.size());
  for (size_t start = 0; start < x.size(); start += static_cast<size_t>(block)) {
    float amax = 0;
    for (int64_t i = 0; i < block; ++i)
      amax = std::max(amax, std::fabs(x[start + i]));
    float inverse = amax > 0 ? 127.0f / amax : 0.0f;
    float scale = block == 32 ? kernels::f16_to_f32(kernels::f32_to_f16(amax / 127.0f))
                  : amax > 0  ? 1.0f / inverse
                              : 0.0f;
    for (int64_t i = 0; i < block; ++i)
      out[start + i] = std::nearbyint(x[start + i] * inverse) * scale;
  }
  return out;
}

std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& weight,
                            float epsilon) {
  double sum = 0;
  for (float value : x)
    sum += static_cast<double>(value) * value;
  double scale = 1.0 / std::sqrt(sum / static_cast<double>(x.size()) + epsilon);
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = static_cast<float>(x[i] * scale * weight[i]);
  return out;
}

}  // namespace

ReferenceTransformer::ReferenceTransformer(const engine::Model& model) : model_(model) {
  embedding_ = dequantize(model.token_embedding());
  auto matrix = [](const engine::WeightMatrix& weights) {
    return Matrix{dequantize(weights), weights.type};
  };
  output_ = matrix(model.output());
  for (const auto& layer : model.layers()) {
    layers_.push_back({matrix(layer.query), matrix(layer.key), matrix(layer.value),
                       matrix(layer.output), matrix(layer.gate), matrix(layer.up),
                       matrix(layer.down)});
  }
  keys_.resize(layers_.size());
  values_.resize(layers_.size());
}

std::vector<float> ReferenceTransformer::multiply(const Matrix& weights,
                                                  const std::vector<float>& input,
                                                  int64_t rows) const {
  const std::vector<float> x = kernels::is_quantized(weights.type)
                                   ? rounded_to_8_bits(input, kernels::block_values(weights.type))
                                   : input;
  const std::vector<float>& matrix = weights.values;
  const int64_t columns = static_cast<int64_t>(x.size());
  std::vector<float> y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t k = 0; k < columns; ++k)
      sum += static_cast<double>(matrix[r * columns + k]) * x[k];
    y[r] = static_cast<float>(sum);
  }
  return y;
}

std::vector<float> ReferenceTransformer::step(engine::TokenId token) {
  const auto& c = model_.config();
  const int64_t hd = c.head_dim;
  std::vector<float> x(embedding_.begin() + token * c.dim,
                       embedding_.begin() + (token + 1) * c.dim);
  auto rope = [&](float* head) {
    int64_t pairs = c.rope_dimensions / 2;
    for (int64_t i = 0; i < pairs; ++i) {
      double theta =
          static_cast<double>(position_) * c.rope.position_scale *
          std::pow(static_cast<double>(c.rope.base),
                   -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dimensions));
      int64_t a = c.rope_style == engine::RopeStyle::adjacent_pairs ? 2 * i : i;
      int64_t b = c.rope_style == engine::RopeStyle::adjacent_pairs ? 2 * i + 1 : i + pairs;
      double x0 = head[a];
      double x1 = head[b];
      head[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
      head[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
    }
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const auto& weights = model_.layers()[l];
    const Layer& layer = layers_[l];
    std::vector<float> normed = rms_norm(x, weights.attention_norm, c.rms_epsilon);
    std::vector<float> q = multiply(layer.query, normed, c.heads * hd);
    std::vector<float> k = multiply(layer.key, normed, c.kv_heads * hd);
    std::vector<float> v = multiply(layer.value, normed, c.kv_heads * hd);
    if (c.attention_bias) {
      for (size_t i = 0; i < q.size(); ++i)
        q[i] += weights.query_bias[i];
      for (size_t i = 0; i < k.size(); ++i)
        k[i] += weights.key_bias[i];
      for (size_t i = 0; i < v.size(); ++i)
        v[i] += weights.value_bias[i];
    }
    for (int64_t h = 0; h < c.heads; ++h)
      rope(q.data() + h * hd);
    for (int64_t h = 0; h < c.kv_heads; ++h)
      rope(k.data() + h * hd);
    keys_[l].push_back(k);
    values_[l].push_back(v);
    std::vector<float> attended(static_cast<size_t>(c.heads * hd), 0.0f);
    for (int64_t h = 0; h < c.heads; ++h) {
      int64_t g = h / (c.heads / c.kv_heads);
      std::vector<double> weights_of(keys_[l].size());
      double largest = -1e300;
      for (size_t p = 0; p < keys_[l].size(); ++p) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d)
          dot += static_cast<double>(q[h * hd + d]) * keys_[l][p][g * hd + d];
        weights_of[p] = dot / std::sqrt(static_cast<double>(hd));
        largest = std::max(largest, weights_of[p]);
      }
      double total = 0;
      for (double& w : weights_of)
        total += w = std::exp(w - largest);
      for (int64_t d = 0; d < hd; ++d) {
        double sum = 0;
        for (size_t p = 0; p < keys_[l].size(); ++p)
          sum += weights_of[p] / total * values_[l][p][g * hd + d];
        attended[h * hd + d] = static_cast<float>(sum);
      }
    }
    std::vector<float> projected = multiply(layer.output, attended, c.dim);
    for (int64_t i = 0; i < c.dim; ++i)
      x[i] += projected[i];
    normed = rms_norm(x, weights.ffn_norm, c.rms_epsilon);
    std::vector<float> gate = multiply(layer.gate, normed, c.ffn);
    std::vector<float> up = multiply(layer.up, normed, c.ffn);
    for (int64_t i = 0; i < c.ffn; ++i)
      gate[i] =
          static_cast<float>(gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i]);
    std::vector<float> down = multiply(layer.down, gate, c.dim);
    for (int64_t i = 0; i < c.dim; ++i)
      x[i] += down[i];
  }
  ++position_;
  return multiply(output_, rms_norm(x, model_.output_norm(), c.rms_epsilon), c.vocabulary);
}

}  // namespace chatflow::testing
