// The `http` moderation provider: a POST in the shape of OpenAI's /v1/moderations,
// {"input": text, "model": model} answered by {"results": [{"flagged", "categories": {name:
// bool}, "category_scores": {name: number}}]} (OpenAI, and the self-hosted services that copy
// its shape). A category trips when the service marks it true, or, where a threshold is set
// for it, when its score reaches the threshold (either way: a threshold can raise or lower the
// service's own bar). The top-level `flagged` counts only for an answer without categories.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/moderation/moderation_provider.h"
#include "framework/tools/http_post.h"

namespace chatflow::moderation {

// {"input": text} with "model" when `model` is not empty.
std::string moderation_request_body(std::string_view text, const std::string& model);

// The verdict in a /v1/moderations answer; nullopt with `error` naming what is missing or of
// the wrong type for anything else. Every result counts (a service may split a long input).
std::optional<Verdict> parse_moderation_response(std::string_view body,
                                                 const std::map<std::string, double>& thresholds,
                                                 std::string& error);

struct HttpModerationSettings {
  tools::HttpEndpoint endpoint;
  std::string url;      // as configured, for messages
  std::string model;    // the body's "model"; empty: left out
  std::string api_key;  // sent as Authorization: Bearer when not empty (read from the environment)
  std::map<std::string, double> thresholds;
  size_t max_response_bytes = 1 << 20;
  std::shared_ptr<const net::TlsClientContext> tls;  // https endpoints
};

class HttpModerationProvider final : public ModerationProvider {
 public:
  explicit HttpModerationProvider(HttpModerationSettings settings)
      : settings_(std::move(settings)) {}
  CheckOutcome check(const CheckInput& input) const override;
  std::string_view kind() const override { return "http"; }

 private:
  HttpModerationSettings settings_;
};

}  // namespace chatflow::moderation
