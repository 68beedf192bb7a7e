#include "framework/engine/model_config.h"

namespace chatflow::engine {

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig config;
  config.architecture = file.get_string("general.architecture");
  const std::string& arch = config.architecture;
  if (arch != "llama" && arch != "qwen2") {
    throw GgufError(file.path() + ": architecture '" + arch +
                    "' is not supported (supported: llama, qwen2)");
  }
  auto key = [&](const std::string& name) { return arch + "." + name; };
  config.dim = static_cast<int64_t>(file.get_unsigned(key("embedding_length")));
  config.layers = static_cast<int64_t>(file.get_unsigned(key("block_count")));
  config.heads = static_cast<int64_t>(file.get_unsigned(key("attention.head_count")));
  config.kv_heads = static_cast<int64_t>(
      file.get_unsigned_or(key("attention.head_count_kv")).value_or(config.heads));
  config.ffn = static_cast<int64_t>(file.get_unsigned(key("feed_forward_length")));
  config.context = static_cast<int64_t>(file.get_unsigned_or(key("context_length")).value_or(2048));
  config.rms_epsilon = static_cast<float>(file.get_float(key("attention.layer_norm_rms_epsilon")));
  config.rope_base = static_cast<float>(file.get_float_or(key("rope.freq_base")).value_or(10000.0));
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
  if (auto scaling = file.get_string_or(key("rope.scaling.type")); scaling && *scaling != "none") {
    if (*scaling != "linear") {
      throw GgufError(file.path() + ": rope scaling '" + *scaling +
                      "' is not supported (supported: none, linear)");
    }
    double factor = file.get_float_or(key("rope.scaling.factor")).value_or(1.0);
    if (factor <= 0) throw GgufError(file.path() + ": rope.scaling.factor must be positive");
    config.rope_position_scale = static_cast<float>(1.0 / factor);
  }
  if (config.layers <= 0 || config.ffn <= 0 || config.context <= 0) {
    throw GgufError(file.path() +
                    ": block_count, feed_forward_length and context_length must be positive");
  }
  config.rope_style = arch == "qwen2" ? RopeStyle::halves : RopeStyle::adjacent_pairs;
  config.attention_bias = arch == "qwen2";
  config.chat_template = file.get_string_or("tokenizer.chat_template").value_or("");
  return config;
}

}  // namespace chatflow::engine
