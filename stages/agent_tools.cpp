#include "stages/agent_tools.h"

#include <thread>

#include <boost/json.hpp>

#include "framework/api/registry.h"
#include "framework/security/crypto.h"

namespace chatflow {
namespace {
namespace json = boost::json;

// A key the endpoint can use to recognise a retried call: fresh per call, the same on each
// attempt, so a call the endpoint carried out but failed to answer is not carried out twice.
std::string new_idempotency_key() {
  return "cf-" + security::random_hex(16);
}

class HttpTool final : public ToolExecutor {
 public:
  HttpTool(HttpToolConfig config, tools::HttpEndpoint endpoint,
           std::shared_ptr<const net::TlsClientContext> tls)
      : config_(std::move(config)), endpoint_(std::move(endpoint)), tls_(std::move(tls)) {}

  ToolOutcome call(const std::string& arguments, const ToolCallContext& context) const override {
    tools::HttpPost post;
    post.endpoint = &endpoint_;
    post.body = arguments;
    post.headers = {{"Content-Type", "application/json"},
                    {"Idempotency-Key", new_idempotency_key()},
                    {"X-Request-Id", context.request_id}};
    post.max_body_bytes = static_cast<size_t>(config_.max_response_bytes);
    post.cancelled = context.cancelled;
    post.tls = tls_.get();
    int attempts = config_.idempotent ? static_cast<int>(config_.retries) + 1 : 1;
    auto per_attempt = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(config_.timeout_s));
    ToolOutcome outcome;
    for (int attempt = 1; attempt <= attempts; ++attempt) {
      if (attempt > 1) {
        // A short pause before trying again, within the loop's deadline.
        auto pause = std::chrono::milliseconds(50 * (attempt - 1));
        if (Clock::now() + pause >= context.deadline) break;
        std::this_thread::sleep_for(pause);
      }
      post.deadline = std::min(Clock::now() + per_attempt, context.deadline);
      tools::HttpOutcome answer = tools::post(post);
      outcome.attempts = attempt;
      using Kind = tools::HttpOutcome::Kind;
      if (answer.kind == Kind::response && answer.status >= 200 && answer.status < 300)
        return {"ok", std::move(answer.body), attempt};
      bool retryable = answer.kind == Kind::connect_failed || answer.kind == Kind::timed_out ||
                       (answer.kind == Kind::response && answer.status >= 500);
      if (answer.kind == Kind::response) {
        outcome.status = "error";
        outcome.content = "HTTP " + std::to_string(answer.status) +
                          (answer.body.empty() ? "" : ": " + answer.body.substr(0, 500));
      } else {
        outcome.status = answer.kind == Kind::timed_out ? "timeout" : "error";
        outcome.content = answer.error;
      }
      if (!retryable || answer.kind == Kind::cancelled) break;
    }
    return outcome;
  }

 private:
  HttpToolConfig config_;
  tools::HttpEndpoint endpoint_;
  std::shared_ptr<const net::TlsClientContext> tls_;  // https endpoints
};

class SearchTool final : public ToolExecutor {
 public:
  SearchTool(std::shared_ptr<RetrievalIndexResource> index, SearchToolConfig config)
      : index_(std::move(index)), config_(std::move(config)) {}

  ToolOutcome call(const std::string& arguments, const ToolCallContext& context) const override {
    json::error_code error;
    json::value parsed = json::parse(arguments, error);
    const json::string* query = nullptr;
    if (!error && parsed.is_object()) {
      if (auto* found = parsed.as_object().if_contains("query"); found && found->is_string())
        query = &found->as_string();
    }
    if (query == nullptr) return {"error", "the arguments need a string \"query\"", 1};
    retrieval::HybridOptions options;
    options.top_k = static_cast<size_t>(config_.top_k);
    // The caller's own reading rights: a search never returns what they could not retrieve.
    auto found = retrieval::hybrid_search(*index_->current(), std::string(*query), options,
                                          reader_of(*context.identity));
    if (found.empty()) return {"ok", "no passages found", 1};
    std::string text;
    for (size_t i = 0; i < found.size(); ++i) {
      const retrieval::Passage& passage = found[i].passage;
      text += "[" + std::to_string(i + 1) + "] " + passage.title + " (" + passage.document + ")\n" +
              passage.text + "\n";
    }
    return {"ok", std::move(text), 1};
  }

 private:
  std::shared_ptr<RetrievalIndexResource> index_;
  SearchToolConfig config_;
};

}  // namespace

const char* const kSearchParameters =
    R"({"type": "object", "properties": {"query": {"type": "string", "maxLength": 200}}, )"
    R"("required": ["query"], "additionalProperties": false})";

std::unique_ptr<ToolExecutor> make_http_tool(const HttpToolConfig& config) {
  std::string error;
  auto endpoint = tools::parse_http_url(config.url, error);
  if (!endpoint) throw ConfigError("http.url " + error);
  std::shared_ptr<const net::TlsClientContext> tls;
  if (endpoint->tls) {
    net::TlsClientOptions options;
    options.ca_file = config.ca_file;
    try {
      tls = std::make_shared<const net::TlsClientContext>(options);
    } catch (const net::TlsError& failure) {
      throw ConfigError("http." + std::string(failure.what()));
    }
  } else if (!config.ca_file.empty()) {
    throw ConfigError("http.ca_file is set, but http.url '" + config.url +
                      "' is not https://: the calls would go unencrypted");
  }
  return std::make_unique<HttpTool>(config, std::move(*endpoint), std::move(tls));
}

std::unique_ptr<ToolExecutor> make_search_tool(std::shared_ptr<RetrievalIndexResource> index,
                                               const SearchToolConfig& config) {
  return std::make_unique<SearchTool>(std::move(index), config);
}

}  // namespace chatflow
