#include "framework/engine/model_config.h"

#include <cmath>
#include <cstring>

#include "kernels/tensor_type.h"

namespace chatflow::engine {
namespace {

constexpr const char* kArchitectures =
    "llama, qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3, phi3";

bool known_architecture(const std::string& arch) {
  for (const char* name :
       {"llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3"}) {
    if (arch == name) return true;
  }
  return false;
}

// A per-pair factor tensor (rope_freqs, rope_factors_long/short), which must be f32.
std::vector<float> frequency_factors(const GgufFile& file, const std::string& name, int64_t pairs) {
  const GgufTensorInfo* tensor = file.find_tensor(name);
  if (tensor == nullptr) return {};
  if (tensor->type != kernels::TensorType::f32 || tensor->shape.size() != 1 ||
      tensor->shape[0] < pairs) {
    throw GgufError(file.path() + ": tensor '" + name + "' must be f32 of at least " +
                    std::to_string(pairs) + " values (one per rotated pair), but is " +
                    std::string(kernels::to_string(tensor->type)) + " " + tensor->shape_text());
  }
  std::vector<float> factors(static_cast<size_t>(pairs));
  std::memcpy(factors.data(), tensor->data, factors.size() * sizeof(float));
  for (float factor : factors) {
    if (!(factor > 0) || !std::isfinite(factor))
      throw GgufError(file.path() + ": tensor '" + name + "' holds a factor that is not positive");
  }
  return factors;
}

// The pair range YaRN corrects, as llama.cpp's ggml_rope_yarn_corr_dims computes it: the pairs
// whose wavelength turns between beta_fast and beta_slow times over the original context.
void set_yarn_range(RopeParameters& rope, int64_t dims, double original_context) {
  constexpr float kBetaFast = 32.0f, kBetaSlow = 1.0f;
  auto pair_of = [&](float rotations) {
    return static_cast<float>(dims) *
           std::log(static_cast<float>(original_context) / (rotations * 2 * 3.14159265358979f)) /
           (2 * std::log(rope.base));
  };
  rope.yarn_low = std::max(0.0f, std::floor(pair_of(kBetaFast)));
  rope.yarn_high = std::min(static_cast<float>(dims - 1), std::ceil(pair_of(kBetaSlow)));
}

}  // namespace

const char* supported_architectures() {
  return kArchitectures;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig config;
  config.architecture = file.get_string("general.architecture");
  const std::string& arch = config.architecture;
  if (!known_architecture(arch)) {
    throw GgufError(file.path() + ": architecture '" + arch +
                    "' is not supported (supported: " + kArchitectures + ")");
  }
  const bool gemma = arch == "gemma2" || arch == "gemma3";
  auto key = [&](const std::string& name) { return arch + "." + name; };
  config.dim = static_cast<int64_t>(file.get_unsigned(key("embedding_length")));
  config.layers = static_cast<int64_t>(file.get_unsigned(key("block_count")));
  config.heads = static_cast<int64_t>(file.get_unsigned(key("attention.head_count")));
  config.kv_heads = static_cast<int64_t>(
      file.get_unsigned_or(key("attention.head_count_kv")).value_or(config.heads));
  config.ffn = static_cast<int64_t>(file.get_unsigned(key("feed_forward_length")));
  config.context = static_cast<int64_t>(file.get_unsigned_or(key("context_length")).value_or(2048));
  config.rms_epsilon = static_cast<float>(file.get_float(key("attention.layer_norm_rms_epsilon")));
  if (config.heads <= 0 || config.dim <= 0 || config.dim % config.heads != 0) {
    throw GgufError(file.path() + ": embedding_length " + std::to_string(config.dim) +
                    " is not a positive multiple of head_count " + std::to_string(config.heads));
  }
  config.head_dim = static_cast<int64_t>(
      file.get_unsigned_or(key("attention.key_length")).value_or(config.dim / config.heads));
  if (auto value_length = file.get_unsigned_or(key("attention.value_length"));
      value_length && static_cast<int64_t>(*value_length) != config.head_dim) {
    throw GgufError(file.path() + ": attention.value_length " + std::to_string(*value_length) +
                    " differs from key_length " + std::to_string(config.head_dim) +
                    "; such models are not supported");
  }
  if (config.kv_heads <= 0 || config.heads % config.kv_heads != 0) {
    throw GgufError(file.path() + ": head_count " + std::to_string(config.heads) +
                    " is not a multiple of head_count_kv " + std::to_string(config.kv_heads));
  }
  config.rope_dimensions = static_cast<int64_t>(
      file.get_unsigned_or(key("rope.dimension_count")).value_or(config.head_dim));
  if (config.rope_dimensions <= 0 || config.rope_dimensions > config.head_dim ||
      config.rope_dimensions % 2 != 0) {
    throw GgufError(file.path() + ": rope.dimension_count " +
                    std::to_string(config.rope_dimensions) +
                    " must be even and at most the head size " + std::to_string(config.head_dim));
  }
  if (config.layers <= 0 || config.ffn <= 0 || config.context <= 0) {
    throw GgufError(file.path() +
                    ": block_count, feed_forward_length and context_length must be positive");
  }

  // Rope: base, scaling, magnitude and per-pair factors.
  const int64_t pairs = config.rope_dimensions / 2;
  RopeParameters& rope = config.rope;
  rope.base = static_cast<float>(file.get_float_or(key("rope.freq_base")).value_or(10000.0));
  const double original_context =
      static_cast<double>(file.get_unsigned_or(key("rope.scaling.original_context_length"))
                              .value_or(static_cast<uint64_t>(config.context)));
  double factor = file.get_float_or(key("rope.scaling.factor")).value_or(0.0);
  if (factor == 0.0) factor = file.get_float_or(key("rope.scale_linear")).value_or(0.0);
  // As llama.cpp reads these files: a factor without a type scales linearly.
  std::string scaling =
      file.get_string_or(key("rope.scaling.type")).value_or(factor > 0 ? "linear" : "none");
  if (scaling != "none" && scaling != "linear" && scaling != "yarn") {
    throw GgufError(file.path() + ": rope scaling '" + scaling +
                    "' is not supported (supported: none, linear, yarn)");
  }
  if (factor < 0) throw GgufError(file.path() + ": rope.scaling.factor must be positive");
  if (scaling != "none" && factor > 0) rope.position_scale = static_cast<float>(1.0 / factor);
  rope.magnitude =
      static_cast<float>(file.get_float_or(key("rope.scaling.attn_factor")).value_or(1.0));
  if (scaling == "yarn") {
    rope.yarn = true;
    set_yarn_range(rope, config.rope_dimensions, original_context);
  }
  rope.frequency_factors = frequency_factors(file, "rope_freqs.weight", pairs);
  if (arch == "phi3") {
    // LongRoPE: the long factors when the model runs beyond its original context.
    bool long_context = static_cast<double>(config.context) > original_context;
    rope.frequency_factors = frequency_factors(
        file, long_context ? "rope_factors_long.weight" : "rope_factors_short.weight", pairs);
  }
  config.sliding_rope = rope;

  config.rope_style = arch == "llama" ? RopeStyle::adjacent_pairs : RopeStyle::halves;
  // qwen2's projections always have biases; some llama files carry them too.
  config.attention_bias =
      arch == "qwen2" || arch == "qwen2moe" || file.find_tensor("blk.0.attn_q.bias") != nullptr;

  config.experts = static_cast<int64_t>(file.get_unsigned_or(key("expert_count")).value_or(0));
  config.experts_used =
      static_cast<int64_t>(file.get_unsigned_or(key("expert_used_count")).value_or(0));
  const bool moe_family = arch == "qwen2moe" || arch == "qwen3moe";
  if (moe_family && config.experts == 0)
    throw GgufError(file.path() + ": " + arch + " needs " + key("expert_count"));
  if (config.experts > 0) {
    if (arch != "llama" && !moe_family) {
      throw GgufError(file.path() + ": experts in a " + arch +
                      " model are not supported (mixture of experts: llama, qwen2moe, qwen3moe)");
    }
    if (config.experts_used <= 0 || config.experts_used > config.experts) {
      throw GgufError(file.path() + ": expert_used_count " + std::to_string(config.experts_used) +
                      " must be between 1 and expert_count " + std::to_string(config.experts));
    }
    config.expert_ffn = config.ffn;
    // Qwen3-MoE renormalises like Mixtral (its norm_topk_prob); Qwen2-MoE does not.
    config.renormalise_expert_weights = arch == "llama" || arch == "qwen3moe";
    if (arch == "qwen3moe") {
      config.expert_ffn =
          static_cast<int64_t>(file.get_unsigned_or(key("expert_feed_forward_length"))
                                   .value_or(static_cast<uint64_t>(config.ffn)));
    }
    if (arch == "qwen2moe") {
      config.expert_ffn = static_cast<int64_t>(
          file.get_unsigned_or(key("expert_feed_forward_length"))
              .value_or(static_cast<uint64_t>(config.ffn / config.experts_used)));
      config.shared_expert_ffn =
          static_cast<int64_t>(file.get_unsigned_or(key("expert_shared_feed_forward_length"))
                                   .value_or(static_cast<uint64_t>(config.ffn)));
    }
  }
  config.query_key_norm = arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3";
  config.post_norms = gemma;
  config.fused_projections = arch == "phi3";
  config.activation = gemma ? Activation::gelu_tanh : Activation::silu;
  config.embedding_scale = gemma ? std::sqrt(static_cast<float>(config.dim)) : 1.0f;
  // Gemma 2 27B scales queries by the model width per head rather than the head size.
  const bool gemma2_27b = arch == "gemma2" && config.layers == 46;
  config.attention_scale =
      1.0f /
      std::sqrt(static_cast<float>(gemma2_27b ? config.dim / config.heads : config.head_dim));

  auto window = file.get_unsigned_or(key("attention.sliding_window"));
  if (arch == "gemma2") {
    config.sliding_window = static_cast<int64_t>(window.value_or(4096));
    config.sliding_layers = SlidingLayers::even;
    config.attention_softcap =
        static_cast<float>(file.get_float_or(key("attn_logit_softcapping")).value_or(50.0));
    config.final_softcap =
        static_cast<float>(file.get_float_or(key("final_logit_softcapping")).value_or(30.0));
  } else if (arch == "gemma3") {
    config.sliding_window = static_cast<int64_t>(window.value_or(4096));
    config.sliding_layers = SlidingLayers::all_but_every_period;
    config.sliding_period = 6;
    // Local layers rotate with their own base and no scaling.
    config.sliding_rope = RopeParameters{};
    config.sliding_rope_differs = true;
    config.sliding_rope.base =
        static_cast<float>(file.get_float_or(key("rope.freq_base_swa")).value_or(10000.0));
  } else if (window) {
    config.sliding_window = static_cast<int64_t>(*window);
  }
  // As llama.cpp reads phi3: the key must be there; 0 (Phi-4) means no window.
  if (arch == "phi3" && !window) {
    throw GgufError(file.path() + ": phi3 needs " + key("attention.sliding_window") +
                    " (0 for none)");
  }
  config.chat_template = file.get_string_or("tokenizer.chat_template").value_or("");
  return config;
}

}  // namespace chatflow::engine
