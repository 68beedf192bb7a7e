// The route table and the side endpoints, called as functions: no socket, no pipeline.
#include "framework/server/routes.h"

#include <gtest/gtest.h>

namespace chatflow::server {
namespace {

class FakeModel final : public ServedModel {
 public:
  const std::string& model_id() const override { return id_; }
  int64_t context_length() const override { return 512; }
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool) const override {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(1);
    for (char c : text)
      ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string detokenize(std::span<const int32_t> tokens) const override {
    std::string text;
    for (int32_t token : tokens) {
      if (token < 0 || token > 255) throw std::out_of_range("token id " + std::to_string(token));
      text += static_cast<char>(token);
    }
    return text;
  }
  EngineStats engine_stats() const override { return {}; }

 private:
  std::string id_ = "tiny";
};

class FakeUsage final : public UsageReporter {
 public:
  std::string usage_json(const std::string& tenant) const override {
    return "{\"tenant\":\"" + tenant + "\"}";
  }
};

class FakeAuthenticator final : public Authenticator {
 public:
  Identity authenticate(const HeaderFields&) const override { return {}; }
  bool is_public(std::string_view) const override { return false; }
};

RouteCall call_on(const ServedPipeline& served) {
  RouteCall call;
  call.served = &served;
  return call;
}

ServedPipeline served_with_model() {
  ServedPipeline served;
  served.models.push_back(std::make_shared<FakeModel>());
  served.model_ids.push_back("tiny");
  return served;
}

TEST(Routes, FindsExactPathsAndTakesTheIdOfPatternRoutes) {
  std::string parameter = "stale";
  const Route* chat = find_route("/v1/chat/completions", parameter);
  ASSERT_NE(chat, nullptr);
  EXPECT_EQ(chat->kind, RouteKind::generation);
  EXPECT_EQ(chat->access, Access::pipeline);
  EXPECT_EQ(parameter, "");

  const Route* session = find_route("/v1/sessions/s-42", parameter);
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->pattern, "/v1/sessions/{id}");
  EXPECT_EQ(parameter, "s-42");

  EXPECT_EQ(find_route("/v1/sessions/", parameter), nullptr);  // an id is required
  EXPECT_EQ(find_route("/v1/chat", parameter), nullptr);
  EXPECT_EQ(find_route("/v1/models", parameter)->pattern, "/v1/models");
}

TEST(Routes, EveryRouteHasOneMethodAndSideRoutesAnEndpoint) {
  for (const Route& route : routes()) {
    EXPECT_FALSE(route.method.empty()) << route.pattern;
    EXPECT_EQ(route.kind == RouteKind::side, route.endpoint != nullptr) << route.pattern;
    EXPECT_EQ(route.access == Access::admin, !route.admin_refusal.empty()) << route.pattern;
  }
}

TEST(Routes, HealthReportsTheServerPhase) {
  std::string parameter;
  const Route* health = find_route("/health", parameter);
  ASSERT_NE(health, nullptr);
  EXPECT_FALSE(health->needs_pipeline);
  RouteCall call;
  call.phase = ServerPhase::loading;
  EXPECT_EQ(health->endpoint(call).status, 503);
  EXPECT_EQ(health->endpoint(call).body, R"({"status":"loading"})");
  call.phase = ServerPhase::draining;
  EXPECT_EQ(health->endpoint(call).body, R"({"status":"draining"})");
  call.phase = ServerPhase::serving;
  EXPECT_EQ(health->endpoint(call).status, 200);
}

TEST(Routes, UnknownModelIs404NamingIt) {
  ServedPipeline served = served_with_model();
  std::string parameter;
  const Route* info = find_route("/v1/models/other", parameter);
  RouteCall call = call_on(served);
  call.parameter = parameter;
  try {
    info->endpoint(call);
    FAIL() << "expected a 404";
  } catch (const RequestFailure& failure) {
    EXPECT_EQ(failure.error().status, 404);
    EXPECT_EQ(failure.error().code, "model_not_found");
    EXPECT_NE(failure.error().message.find("'other'"), std::string::npos);
  }
  call.parameter = "tiny";
  Response found = info->endpoint(call);
  EXPECT_EQ(found.status, 200);
  EXPECT_NE(found.body.find("\"max_model_len\":512"), std::string::npos);
}

TEST(Routes, TokenizeAndDetokenizeUseTheServedModel) {
  ServedPipeline served = served_with_model();
  std::string parameter;
  RouteCall call = call_on(served);
  call.body = R"({"prompt": "hi", "add_special_tokens": false})";
  Response tokens = find_route("/tokenize", parameter)->endpoint(call);
  EXPECT_EQ(tokens.body, R"({"tokens":[104,105],"count":2,"max_model_len":512})");
  call.body = R"({"tokens": [104, 999]})";
  try {
    find_route("/detokenize", parameter)->endpoint(call);
    FAIL() << "expected a 400";
  } catch (const RequestFailure& failure) {
    EXPECT_EQ(failure.error().status, 400);
    EXPECT_EQ(failure.error().code, "invalid_token");
  }
}

TEST(Routes, UsageOfAnotherTenantIsForAdminsOnly) {
  ServedPipeline served;
  FakeUsage usage;
  FakeAuthenticator authenticator;
  served.usage = &usage;
  served.authenticator = &authenticator;
  std::string parameter;
  const Route* route = find_route("/v1/usage", parameter);
  RouteCall call = call_on(served);
  call.caller.tenant = "acme";
  EXPECT_EQ(route->endpoint(call).body, R"({"tenant":"acme"})");
  call.query = "tenant=globex";
  EXPECT_THROW(route->endpoint(call), RequestFailure);
  call.caller.roles = {"admin"};
  EXPECT_EQ(route->endpoint(call).body, R"({"tenant":"globex"})");
}

TEST(Routes, AdminRoutesRefuseOtherCallersWhenThePipelineAuthenticates) {
  ServedPipeline served;
  FakeAuthenticator authenticator;
  std::string parameter;
  const Route* reload = find_route("/admin/reload", parameter);
  RouteCall call = call_on(served);
  EXPECT_NO_THROW(require_admin(*reload, call));  // no auth stage: nothing to check against
  served.authenticator = &authenticator;
  try {
    require_admin(*reload, call);
    FAIL() << "expected a 403";
  } catch (const RequestFailure& failure) {
    EXPECT_EQ(failure.error().status, 403);
    EXPECT_EQ(failure.error().message, "only admins may reload the pipeline");
  }
  call.caller.roles = {"admin"};
  EXPECT_NO_THROW(require_admin(*reload, call));
}

}  // namespace
}  // namespace chatflow::server
