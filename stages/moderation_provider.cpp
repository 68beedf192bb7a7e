#include "stages/moderation_provider.h"

#include <charconv>
#include <cstdlib>
#include <future>

#include <boost/json.hpp>

#include "framework/moderation/llama_guard.h"
#include "framework/moderation/openai_moderation.h"
#include "framework/security/loopback.h"
#include "stages/upstream.h"

namespace chatflow {
namespace {

using moderation::CheckClock;
using moderation::CheckInput;

// The classifier's question to a gguf_model: one user message through the model's chat
// template, greedy, on the engine's batches beside the requests' own sequences.
moderation::TaskGenerator gguf_generator(std::shared_ptr<GgufModel> model, int64_t max_tokens) {
  return [model, max_tokens](const std::string& task, const CheckInput& input) {
    Request probe;
    probe.kind = RequestKind::chat;
    probe.messages = {{"user", task}};
    auto deadline = input.deadline;
    auto abandoned = input.abandoned;
    return model->generate_text(
        model->encode_prompt(probe, true), max_tokens, input.tenant, [deadline, abandoned] {
          return CheckClock::now() >= deadline || (abandoned && abandoned());
        });
  };
}

// The classifier's answer from an upstream engine, collected from its stream.
class ClassifierAnswer final : public upstream::StreamObserver {
 public:
  ClassifierAnswer(CheckClock::time_point deadline, std::function<bool()> abandoned)
      : deadline_(deadline), abandoned_(std::move(abandoned)) {}

  // A verdict is a few words: an engine that goes on is stopped, and judged on what it said.
  bool on_output(const upstream::StreamEvent& event, bool, const std::string&) override {
    text_ += event.content;
    if (text_.size() < kEnoughBytes) return true;
    settle([&] { result_.set_value(text_); });
    return false;
  }
  void on_end(const upstream::StreamEnd&) override {
    settle([&] { result_.set_value(text_); });
  }
  void on_failure(const RequestError& error, bool) override {
    settle(
        [&] { result_.set_exception(std::make_exception_ptr(std::runtime_error(error.message))); });
  }
  bool cancelled() const override {
    return CheckClock::now() >= deadline_ || (abandoned_ && abandoned_());
  }
  void on_abandoned() override {
    settle([&] {
      result_.set_exception(
          std::make_exception_ptr(std::runtime_error("no answer within the timeout")));
    });
  }
  std::future<std::string> future() { return result_.get_future(); }

 private:
  template <class F>
  void settle(F&& action) {
    std::lock_guard lock(mutex_);
    if (settled_) return;
    settled_ = true;
    action();
  }

  static constexpr size_t kEnoughBytes = 4096;
  CheckClock::time_point deadline_;
  std::function<bool()> abandoned_;
  std::string text_;  // the client's thread only
  std::mutex mutex_;
  bool settled_ = false;
  std::promise<std::string> result_;
};

moderation::TaskGenerator upstream_generator(std::shared_ptr<UpstreamModel> engine,
                                             std::string model, int64_t max_tokens) {
  return [engine, model, max_tokens](const std::string& task, const CheckInput& input) {
    auto answer = std::make_shared<ClassifierAnswer>(input.deadline, input.abandoned);
    auto result = answer->future();
    boost::json::object body{
        {"model", model},
        {"messages", boost::json::array{boost::json::object{{"role", "user"}, {"content", task}}}},
        {"max_tokens", max_tokens},
        {"temperature", 0},
        {"stream", true}};
    upstream::UpstreamCall call;
    call.path = "/v1/chat/completions";
    call.body = boost::json::serialize(body);
    if (!input.request_id.empty()) call.headers.emplace_back("X-Request-Id", input.request_id);
    call.observer = answer;
    engine->client().start(std::move(call));
    // The observer stops the call at the deadline; this bounds the wait should it not.
    if (result.wait_until(input.deadline + std::chrono::milliseconds(100)) !=
        std::future_status::ready)
      throw std::runtime_error("no answer within the timeout");
    return result.get();
  };
}

std::map<std::string, double> read_thresholds(const std::map<std::string, std::string>& written) {
  std::map<std::string, double> thresholds;
  for (const auto& [category, text] : written) {
    double value = -1;
    auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (status != std::errc() || end != text.data() + text.size() || value < 0 || value > 1) {
      throw ConfigError("provider.thresholds." + category +
                        ": expected a score from 0 to 1, got '" + text + "'");
    }
    thresholds[category] = value;
  }
  return thresholds;
}

std::shared_ptr<const moderation::ModerationProvider> http_provider(
    const ModerationProviderConfig& config) {
  if (config.url.empty()) throw ConfigError("provider.url: an http provider needs its URL");
  if (!config.gguf_model.empty() || !config.upstream.empty() || !config.categories.empty())
    throw ConfigError("provider: gguf_model, upstream and categories are for type: classifier");
  std::string error;
  auto endpoint = tools::parse_http_url(config.url, error);
  if (!endpoint) throw ConfigError("provider.url: " + error);
  if (!endpoint->tls && !security::is_loopback_host(endpoint->host)) {
    throw ConfigError("provider.url: '" + config.url +
                      "' is plain http to another host, where anyone on the way reads " +
                      (config.api_key_env.empty() ? std::string("the prompts")
                                                  : "the API key (api_key_env) and the prompts") +
                      " and can answer in the provider's place; use https (ca_file for a private "
                      "CA), or http only to a loopback address");
  }
  moderation::HttpModerationSettings settings;
  settings.endpoint = std::move(*endpoint);
  settings.url = config.url;
  settings.model = config.model;
  settings.thresholds = read_thresholds(config.thresholds);
  if (settings.endpoint.tls) {
    net::TlsClientOptions options;
    options.ca_file = config.ca_file;
    try {
      settings.tls = std::make_shared<const net::TlsClientContext>(options);
    } catch (const net::TlsError& failure) {
      throw ConfigError("provider.ca_file: " + std::string(failure.what()));
    }
  } else if (!config.ca_file.empty()) {
    throw ConfigError("provider.ca_file is set, but provider.url '" + config.url +
                      "' is not https://: the calls would go unencrypted");
  }
  if (!config.api_key_env.empty()) {
    const char* key = std::getenv(config.api_key_env.c_str());
    if (key == nullptr || *key == '\0') {
      throw ConfigError("provider.api_key_env: the environment variable '" + config.api_key_env +
                        "' is not set (the provider's API key is read from it)");
    }
    settings.api_key = key;
  }
  return std::make_shared<moderation::HttpModerationProvider>(std::move(settings));
}

std::shared_ptr<const moderation::ModerationProvider> classifier_provider(
    const ModerationProviderConfig& config, StageContext& context) {
  if (!config.url.empty() || !config.api_key_env.empty() || !config.thresholds.empty() ||
      !config.ca_file.empty())
    throw ConfigError("provider: url, api_key_env, ca_file and thresholds are for type: http");
  if (config.gguf_model.empty() == config.upstream.empty())
    throw ConfigError("provider: a classifier needs exactly one of gguf_model and upstream");
  std::vector<std::string> categories =
      config.categories.empty() ? moderation::llama_guard_categories() : config.categories;
  if (!config.gguf_model.empty()) {
    if (!config.model.empty())
      throw ConfigError("provider.model: a gguf_model classifier is named by gguf_model alone");
    auto model = context.resource<GgufModel>(config.gguf_model);
    if (model->tokenizer_only())
      throw ConfigError("provider.gguf_model: '" + config.gguf_model + "' is tokenizer_only");
    return std::make_shared<moderation::ClassifierProvider>(
        gguf_generator(model, config.max_tokens), std::move(categories),
        "gguf_model '" + config.gguf_model + "'");
  }
  auto engine = context.resource<UpstreamModel>(config.upstream);
  std::string model = config.model.empty() ? engine->upstream_model() : config.model;
  return std::make_shared<moderation::ClassifierProvider>(
      upstream_generator(engine, model, config.max_tokens), std::move(categories),
      "upstream '" + config.upstream + "'");
}

}  // namespace

std::string join_names(const std::vector<std::string>& names, const std::string& separator) {
  std::string joined;
  for (const auto& name : names)
    joined += (joined.empty() ? "" : separator) + name;
  return joined;
}

SchemaBuilder<ModerationProviderConfig> moderation_provider_schema(const std::string& actions_doc) {
  using Config = ModerationProviderConfig;
  SchemaBuilder<Config> schema;
  schema.key("type", &Config::type, "http (a /v1/moderations service) or classifier (a model)")
      .required()
      .choices({"http", "classifier"});
  schema.key("url", &Config::url, "http: where the {\"input\", \"model\"} body is POSTed");
  schema.key("model", &Config::model,
             "http: the body's \"model\" (empty: left out); classifier on an upstream: the model "
             "name sent (empty: the upstream's)");
  schema.key("api_key_env", &Config::api_key_env,
             "http: the environment variable holding the API key (sent as Authorization: "
             "Bearer); never the key itself");
  schema.key("thresholds", &Config::thresholds,
             "http: category -> score from 0 to 1 at which it trips (over the service's own "
             "true/false)");
  schema.key("ca_file", &Config::ca_file,
             "http with an https url: PEM file of the CA certificates trusted (empty: the "
             "system's)");
  schema.key("gguf_model", &Config::gguf_model, "classifier: the gguf_model asked")
      .resource("gguf_model");
  schema.key("upstream", &Config::upstream, "classifier: the upstream engine asked")
      .resource("upstream");
  schema.key("categories", &Config::categories,
             "classifier: the categories listed in the prompt (empty: Llama Guard 3's S1-S14)");
  schema.key("max_tokens", &Config::max_tokens, "classifier: the answer's length at most")
      .range(2, 256);
  schema.key("timeout_ms", &Config::timeout_ms, "each check's time limit").range(1, 600'000);
  schema
      .key("on_error", &Config::on_error,
           "no verdict (timeout, error, unreadable answer): fail_open lets the text through "
           "(annotated), fail_closed refuses it")
      .choices({"fail_open", "fail_closed"});
  schema.key("actions", &Config::actions, actions_doc);
  schema.key("threads", &Config::threads, "checks run at once (more wait their turn)")
      .range(1, 256);
  return schema;
}

ModerationHook::ModerationHook(std::shared_ptr<moderation::ProviderRunner> runner,
                               std::chrono::milliseconds timeout, moderation::OnError on_error,
                               std::map<std::string, std::string> actions,
                               std::string default_action)
    : runner_(std::move(runner)),
      timeout_(timeout),
      on_error_(on_error),
      actions_(std::move(actions)),
      default_action_(std::move(default_action)) {}

std::shared_ptr<moderation::PendingCheck> ModerationHook::start(const Request& request,
                                                                std::string text,
                                                                moderation::Speaker speaker,
                                                                std::string question) const {
  CheckInput input;
  input.text = std::move(text);
  input.speaker = speaker;
  input.question = std::move(question);
  input.deadline = CheckClock::now() + timeout_;
  input.request_id = request.request_id.empty() ? request.id : request.request_id;
  input.tenant = request.identity.tenant;
  return runner_->start(std::move(input));
}

Judgement ModerationHook::judge(const moderation::Verdict& verdict) const {
  Judgement judgement;
  if (!verdict.flagged) return judgement;
  // A flagged verdict that names no category gets the default action under the name "flagged".
  std::vector<std::string> categories = verdict.categories;
  if (categories.empty()) categories.push_back("flagged");
  for (const auto& category : categories) {
    auto found = actions_.find(category);
    const std::string& action = found == actions_.end() ? default_action_ : found->second;
    if (action == "flag") {
      judgement.noted.push_back(category);
    } else if (action != "ignore") {
      judgement.acted.push_back(category);
    }
  }
  return judgement;
}

std::string ModerationHook::describe() const {
  return "moderation provider '" + runner_->name() + "' (" +
         std::string(runner_->provider().kind()) + ")";
}

std::string ModerationHook::failure_text(const moderation::CheckOutcome& outcome) const {
  if (outcome.kind == moderation::CheckOutcome::Kind::timed_out)
    return "gave no answer within " + moderation::milliseconds_text(timeout_);
  return "failed: " + outcome.error;
}

std::string ModerationHook::error_note(const moderation::CheckOutcome& outcome) const {
  return std::string(moderation::to_string(outcome.kind)) + ":" +
         std::string(moderation::to_string(on_error_));
}

std::shared_ptr<ModerationHook> make_moderation_hook(
    const ModerationProviderConfig& config, StageContext& context,
    const std::vector<std::string>& allowed_actions, const std::string& default_action) {
  if (config.type.empty()) return nullptr;
  for (const auto& [category, action] : config.actions) {
    if (std::find(allowed_actions.begin(), allowed_actions.end(), action) ==
        allowed_actions.end()) {
      throw ConfigError("provider.actions." + category + ": expected one of " +
                        join_names(allowed_actions) + ", got '" + action + "'");
    }
  }
  auto provider =
      config.type == "http" ? http_provider(config) : classifier_provider(config, context);
  auto runner = std::make_shared<moderation::ProviderRunner>(
      std::move(provider), context.stage_name(), static_cast<size_t>(config.threads));
  return std::make_shared<ModerationHook>(
      std::move(runner), std::chrono::milliseconds(config.timeout_ms),
      config.on_error == "fail_open" ? moderation::OnError::fail_open
                                     : moderation::OnError::fail_closed,
      config.actions, default_action);
}

}  // namespace chatflow
