// upstream: see upstream.h. Everything is read and checked when the pipeline is built (validate
// included); nothing contacts an endpoint until the first health check or request.
#include "stages/upstream.h"

#include <filesystem>

#include "framework/api/config_value.h"

namespace chatflow {
namespace {

struct HealthConfig {
  std::string path = "/health";
  int64_t interval_ms = 5000;
  int64_t timeout_ms = 2000;
};

struct BreakerConfig {
  int64_t failures = 5;
  int64_t cooldown_ms = 10000;
};

struct TlsConfig {
  bool verify = true;
  std::string ca_file;
};

struct UpstreamConfig {
  ConfigValue endpoints;
  std::string model;
  std::string name;
  std::string api_key;
  int64_t connect_ms = 2000;
  int64_t first_byte_ms = 60000;
  int64_t idle_ms = 30000;
  int64_t retries = 2;
  int64_t max_idle_connections = 64;
  int64_t context_length = 0;
  std::string tokenizer;
  int64_t max_tokens_default = 0;
  int64_t max_answer_bytes = 16 << 20;
  int64_t max_answer_ms = 600000;
  HealthConfig health;
  BreakerConfig circuit_breaker;
  TlsConfig tls;
};

// A list of base URLs, or one string of them separated by commas (${CHATFLOW_UPSTREAM_URLS});
// list items may hold commas too.
std::vector<upstream::EndpointUrl> read_endpoints(const ConfigValue& value) {
  std::vector<std::string> texts;
  if (value.is_scalar()) {
    texts = upstream::split_endpoint_list(value.text);
  } else if (value.is_sequence()) {
    for (const auto& item : value.items) {
      if (!item.is_scalar())
        throw ConfigError("endpoints: expected base URLs, but an item is " + item.describe());
      for (auto& text : upstream::split_endpoint_list(item.text))
        texts.push_back(std::move(text));
    }
  } else if (!value.is_null()) {
    throw ConfigError("endpoints: expected a list of base URLs or a comma-separated string, got " +
                      value.describe());
  }
  if (texts.empty()) {
    throw ConfigError(
        "endpoints: no endpoint given (expected base URLs such as http://10.0.0.5:8000, e.g. "
        "from CHATFLOW_UPSTREAM_URLS=http://a:8000,http://b:8000)");
  }
  std::vector<upstream::EndpointUrl> endpoints;
  for (const auto& text : texts) {
    std::string error;
    auto endpoint = upstream::parse_endpoint_url(text, error);
    if (!endpoint) throw ConfigError("endpoints: " + error);
    for (const auto& known : endpoints) {
      if (known.text == endpoint->text)
        throw ConfigError("endpoints: '" + text + "' is listed twice");
    }
    endpoints.push_back(std::move(*endpoint));
  }
  return endpoints;
}

std::shared_ptr<Resource> create_upstream(const UpstreamConfig& config, ResourceContext& context) {
  upstream::UpstreamSettings settings;
  settings.endpoints = read_endpoints(config.endpoints);
  if (config.model.empty())
    throw ConfigError("model: the name the engine knows the model by must not be empty");
  if (!config.health.path.empty() && config.health.path.front() != '/')
    throw ConfigError("health.path: expected a path starting with '/', got '" + config.health.path +
                      "'");
  if (!config.tls.ca_file.empty() && !std::filesystem::exists(config.tls.ca_file))
    throw ConfigError("tls.ca_file: no such file '" + config.tls.ca_file + "'");
  settings.api_key = config.api_key;
  settings.connect_timeout = std::chrono::milliseconds(config.connect_ms);
  settings.first_byte_timeout = std::chrono::milliseconds(config.first_byte_ms);
  settings.idle_timeout = std::chrono::milliseconds(config.idle_ms);
  settings.retries = static_cast<int>(config.retries);
  settings.max_idle_connections = static_cast<size_t>(config.max_idle_connections);
  settings.health.path = config.health.path;
  settings.health.interval =
      std::chrono::milliseconds(config.health.path.empty() ? 0 : config.health.interval_ms);
  settings.health.timeout = std::chrono::milliseconds(config.health.timeout_ms);
  settings.breaker.failure_threshold = static_cast<int>(config.circuit_breaker.failures);
  settings.breaker.cooldown = std::chrono::milliseconds(config.circuit_breaker.cooldown_ms);
  settings.verify_tls = config.tls.verify;
  settings.ca_file = config.tls.ca_file;
  settings.max_answer_bytes = static_cast<size_t>(config.max_answer_bytes);
  settings.max_answer_time = std::chrono::milliseconds(config.max_answer_ms);
  std::shared_ptr<GgufModel> tokenizer;
  if (!config.tokenizer.empty()) tokenizer = context.resource<GgufModel>(config.tokenizer);
  return std::make_shared<UpstreamModel>(
      std::move(settings), config.model, config.name.empty() ? config.model : config.name,
      config.context_length, std::move(tokenizer), config.max_tokens_default);
}

ResourceTypeInfo upstream_resource_type() {
  ResourceTypeBuilder<UpstreamConfig> type(
      "upstream",
      "An OpenAI-compatible engine (vLLM, TGI, llama.cpp's server, another chatflow) at one or "
      "more endpoints: keep-alive pools, TLS, health checks, circuit breakers, failover before "
      "the first byte, least-outstanding balancing with session affinity.");
  SchemaBuilder<HealthConfig> health;
  health.key("path", &HealthConfig::path,
             "GET this path on each endpoint; 200 is healthy (/health for vLLM, TGI, llama.cpp "
             "and chatflow; /v1/models for hosted APIs); empty: no health checks");
  health.key("interval_ms", &HealthConfig::interval_ms, "time between two checks of an endpoint")
      .range(50, 3'600'000);
  health.key("timeout_ms", &HealthConfig::timeout_ms, "a check not answered in this time fails")
      .range(1, 600'000);
  SchemaBuilder<BreakerConfig> breaker;
  breaker
      .key("failures", &BreakerConfig::failures,
           "failed calls in a row that open the endpoint's breaker")
      .range(1, 1'000'000);
  breaker
      .key("cooldown_ms", &BreakerConfig::cooldown_ms,
           "how long an open breaker keeps calls away before one trial call")
      .range(1, 86'400'000);
  SchemaBuilder<TlsConfig> tls;
  tls.key("verify", &TlsConfig::verify,
          "verify https endpoints' certificates and host names (off only for testing)");
  tls.key("ca_file", &TlsConfig::ca_file,
          "PEM file of the certificate authorities to trust; empty: the system's");
  type.config()
      .key("endpoints", &UpstreamConfig::endpoints,
           "base URLs (http:// or https://), as a list or one comma-separated string such as "
           "${CHATFLOW_UPSTREAM_URLS}")
      .required();
  type.config()
      .key("model", &UpstreamConfig::model, "the model name the engine knows (sent as \"model\")")
      .required();
  type.config().key("name", &UpstreamConfig::name,
                    "the model id clients ask for; default: the same as model");
  type.config().key("api_key", &UpstreamConfig::api_key,
                    "sent as Authorization: Bearer to every endpoint; empty: none");
  type.config()
      .key("connect_ms", &UpstreamConfig::connect_ms, "connecting (and TLS) at most this long")
      .range(1, 600'000);
  type.config()
      .key("first_byte_ms", &UpstreamConfig::first_byte_ms,
           "from the request sent to the engine's first output at most this long (its queue and "
           "prefill)")
      .range(1, 86'400'000);
  type.config()
      .key("idle_ms", &UpstreamConfig::idle_ms,
           "once streaming, at most this long without a byte from the engine")
      .range(1, 86'400'000);
  type.config()
      .key("retries", &UpstreamConfig::retries,
           "more endpoints tried when one fails before the first output")
      .range(0, 100);
  type.config()
      .key("max_idle_connections", &UpstreamConfig::max_idle_connections,
           "keep-alive connections kept per endpoint")
      .range(0, 100'000);
  type.config()
      .key("context_length", &UpstreamConfig::context_length,
           "the context /v1/models reports; 0: the tokenizer's, else unknown")
      .at_least(0);
  type.config()
      .key("tokenizer", &UpstreamConfig::tokenizer,
           "a gguf_model whose tokenizer counts tokens as the engine does (when the engine "
           "reports no usage); empty: estimated")
      .resource("gguf_model");
  type.config()
      .key("max_tokens_default", &UpstreamConfig::max_tokens_default,
           "the answer's bound when a request gives no max_tokens; 0: up to the context "
           "(context_length or the tokenizer's, less the prompt), else 4096")
      .at_least(0);
  type.config()
      .key("max_answer_bytes", &UpstreamConfig::max_answer_bytes,
           "bytes one answer's stream may hold, whatever the engine sends; past it the answer "
           "ends with an error")
      .range(1024, int64_t{1} << 40);
  type.config()
      .key("max_answer_ms", &UpstreamConfig::max_answer_ms,
           "from the request sent to the answer's end at most this long")
      .range(1, 86'400'000);
  type.config().object("health", &UpstreamConfig::health, health, "health checks");
  type.config().object("circuit_breaker", &UpstreamConfig::circuit_breaker, breaker,
                       "per-endpoint circuit breaker");
  type.config().object("tls", &UpstreamConfig::tls, tls, "https endpoints");
  type.create(create_upstream);
  return type.build();
}

CHATFLOW_REGISTER_TYPE(upstream_resource_type);

}  // namespace

UpstreamModel::UpstreamModel(upstream::UpstreamSettings settings, std::string upstream_model,
                             std::string served_name, int64_t context_length,
                             std::shared_ptr<GgufModel> tokenizer, int64_t max_tokens_default)
    : client_(std::move(settings)),
      upstream_model_(std::move(upstream_model)),
      served_name_(std::move(served_name)),
      context_length_(context_length),
      tokenizer_(std::move(tokenizer)),
      max_tokens_default_(max_tokens_default) {
  if (tokenizer_ && tokenizer_->tokenizer().vocabulary().add_space_prefix) {
    auto vocabulary = std::make_shared<engine::Vocabulary>(tokenizer_->tokenizer().vocabulary());
    vocabulary->add_space_prefix = false;
    continuation_tokenizer_ = std::make_unique<engine::Tokenizer>(std::move(vocabulary));
  }
}

int64_t UpstreamModel::count_prompt_tokens(const Request& request) const {
  if (tokenizer_) return static_cast<int64_t>(tokenizer_->encode_prompt(request, true).size());
  int64_t bytes = static_cast<int64_t>(request.prompt.size());
  int64_t messages = 0;
  for (const auto& message : request.messages) {
    bytes += static_cast<int64_t>(message.content.size());
    ++messages;
  }
  return (bytes + 3) / 4 + 4 * messages;
}

int64_t UpstreamModel::count_text_tokens(const std::string& text) const {
  if (tokenizer_) return static_cast<int64_t>(tokenizer_->tokenize(text, false, false).size());
  return (static_cast<int64_t>(text.size()) + 3) / 4;
}

int64_t UpstreamModel::prompt_token_bound(const Request& request) const {
  // Generous for the template's own text (markers, a default system prompt, the tools'
  // instructions): the bound only has to stop an absurd count from being charged.
  constexpr int64_t kPerMessage = 16;
  constexpr int64_t kTemplate = 256;
  auto size = [](const std::string& text) { return static_cast<int64_t>(text.size()); };
  int64_t bytes = size(request.prompt) + size(request.chat_template_kwargs) + kTemplate;
  for (const auto& message : request.messages) {
    bytes += size(message.role) + size(message.content) + size(message.tool_call_id) + kPerMessage;
    for (const auto& call : message.tool_calls)
      bytes += size(call.name) + size(call.arguments) + kPerMessage;
  }
  for (const auto& tool : request.generation.tools)
    bytes += size(tool.name) + size(tool.description) + size(tool.parameters) + kPerMessage;
  return bytes;
}

UpstreamModel::AnswerLimit UpstreamModel::uncapped_answer_limit(const GenerationParams& generation,
                                                                int64_t prompt_tokens) const {
  if (generation.max_tokens > 0) return {generation.max_tokens, true};
  if (max_tokens_default_ > 0) return {max_tokens_default_, true};
  if (context_length_ > 0) return {std::max<int64_t>(1, context_length_ - prompt_tokens), false};
  if (tokenizer_) {
    int64_t room = std::max<int64_t>(1, tokenizer_->context_length() - prompt_tokens);
    int64_t configured = tokenizer_->max_tokens_default();
    if (configured > 0 && configured < room) return {configured, true};
    return {room, false};
  }
  return {kMaxTokensWithoutContext, true};
}

UpstreamModel::AnswerLimit UpstreamModel::answer_limit(const GenerationParams& generation,
                                                       int64_t prompt_tokens) const {
  AnswerLimit limit = uncapped_answer_limit(generation, prompt_tokens);
  int64_t capped = capped_answer_tokens(generation, limit.tokens);
  // Below what the engine would bound itself to: it is told what the gates granted.
  if (capped < limit.tokens) return {capped, true};
  return limit;
}

int64_t UpstreamModel::answer_token_limit(const GenerationParams& generation,
                                          int64_t prompt_tokens) const {
  return answer_limit(generation, prompt_tokens).tokens;
}

int64_t UpstreamModel::prompt_token_count(const Request& request) const {
  if (tokenizer_) return static_cast<int64_t>(tokenizer_->encode_prompt(request, true).size());
  return prompt_token_bound(request);
}

int64_t UpstreamModel::count_output_tokens(std::string_view text, int64_t engine_events) const {
  if (tokenizer_) {
    const engine::Tokenizer& counting =
        continuation_tokenizer_ ? *continuation_tokenizer_ : tokenizer_->tokenizer();
    return std::max<int64_t>(1, static_cast<int64_t>(counting.encode(text, false, false).size()));
  }
  auto by_bytes =
      (static_cast<int64_t>(text.size()) + kBytesPerTokenAtMost - 1) / kBytesPerTokenAtMost;
  return std::max({int64_t{1}, engine_events, by_bytes});
}

std::string UpstreamModel::cut_output(std::string_view text, int64_t tokens,
                                      int64_t counted) const {
  if (tokens <= 0) return {};
  if (tokens >= counted) return std::string(text);
  auto utf8_start = [&](size_t at) {
    while (at > 0 && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80)
      --at;
    return at;
  };
  if (!tokenizer_) {
    // The events were merged: their text is shared out evenly among the tokens they stand for.
    auto keep = static_cast<size_t>(static_cast<int64_t>(text.size()) * tokens / counted);
    return std::string(text.substr(0, utf8_start(keep)));
  }
  // The longest start the tokenizer counts within `tokens`.
  size_t low = 0, high = text.size();
  while (low < high) {
    size_t middle = utf8_start(low + (high - low + 1) / 2);
    if (middle <= low) break;
    if (count_output_tokens(text.substr(0, middle), 1) <= tokens) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return std::string(text.substr(0, low));
}

int64_t UpstreamModel::context_length() const {
  if (context_length_ > 0 || !tokenizer_) return context_length_;
  return tokenizer_->context_length();
}

const GgufModel& UpstreamModel::required_tokenizer() const {
  if (tokenizer_) return *tokenizer_;
  throw RequestFailure(RequestError{400,
                                    "invalid_request_error",
                                    "the upstream model '" + served_name_ +
                                        "' has no tokenizer here (set the upstream's tokenizer: "
                                        "to a gguf_model)",
                                    "no_tokenizer",
                                    {}});
}

std::vector<int32_t> UpstreamModel::tokenize(std::string_view text, bool add_special,
                                             bool parse_special) const {
  return required_tokenizer().tokenize(text, add_special, parse_special);
}

std::string UpstreamModel::detokenize(std::span<const int32_t> tokens) const {
  return required_tokenizer().detokenize(tokens);
}

EngineStats UpstreamModel::engine_stats() const {
  EngineStats stats;
  stats.running = client_.outstanding();
  return stats;
}

}  // namespace chatflow
