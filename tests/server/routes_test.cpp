// The route table and the side endpoints, called as functions: no socket, no pipeline.
#include "framework/server/routes.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/history/history_store.h"
#include "stages/history_store.h"
#include "support/pipeline_helpers.h"

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

TEST(Routes, APathAnswersEachOfItsMethodsAndNamesThemAll) {
  std::string parameter;
  const Route* first = find_route("/v1/sessions/s1", parameter);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(route_for_method(*first, "GET").endpoint, first->endpoint);
  EXPECT_EQ(route_for_method(*first, "PATCH").method, "PATCH");
  EXPECT_EQ(route_for_method(*first, "DELETE").method, "DELETE");
  EXPECT_NE(route_for_method(*first, "PATCH").endpoint,
            route_for_method(*first, "DELETE").endpoint);
  // A method the path does not answer keeps the first route: the connection answers 405.
  EXPECT_EQ(&route_for_method(*first, "PUT"), first);
  EXPECT_EQ(allowed_methods(*first), "GET, PATCH, DELETE");
  const Route* list = find_route("/v1/sessions", parameter);
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(list->pattern, "/v1/sessions");
  EXPECT_EQ(allowed_methods(*list), "GET, POST, DELETE");
  EXPECT_EQ(find_route("/v1/sessions:export", parameter)->method, "GET");
  EXPECT_EQ(find_route("/v1/sessions/export", parameter)->pattern, "/v1/sessions/{id}")
      << "a session may be named export";
  EXPECT_EQ(allowed_methods(*find_route("/v1/cache", parameter)), "DELETE");
}

// A served pipeline with a history store in memory and an authenticating stage.
struct SessionsFixture {
  SessionsFixture() {
    auto store = history::make_memory_store();
    raw = store.get();
    resource = std::make_shared<HistoryStoreResource>(std::move(store));
    served.history = resource.get();
    served.authenticator = &authenticator;
  }
  RouteCall call(const std::string& user, const std::string& query = {}) {
    RouteCall call = call_on(served);
    call.caller.tenant = "acme";
    call.caller.user = user;
    call.query = query;
    return call;
  }
  boost::json::object answer(const std::string& path, const std::string& method, RouteCall call) {
    std::string parameter;
    const Route& route = route_for_method(*find_route(path, parameter), method);
    EXPECT_EQ(route.method, method);
    call.parameter = parameter;
    Response response = route.endpoint(call);
    EXPECT_EQ(response.status, 200);
    return boost::json::parse(response.body).as_object();
  }
  // The error a call fails with.
  RequestError refusal(const std::string& path, const std::string& method, RouteCall call) {
    std::string parameter;
    const Route& route = route_for_method(*find_route(path, parameter), method);
    call.parameter = parameter;
    try {
      route.endpoint(call);
    } catch (const RequestFailure& failure) {
      return failure.error();
    }
    ADD_FAILURE() << method << " " << path << " did not fail";
    return {};
  }
  history::HistoryStore* raw = nullptr;
  std::shared_ptr<HistoryStoreResource> resource;
  FakeAuthenticator authenticator;
  ServedPipeline served;
};

history::Turn turn(const std::string& user) {
  return {user, "answer", history::TurnStatus::completed, 1, 1, 0};
}

TEST(Routes, SessionListIsTheCallersOwnNewestFirstInPages) {
  SessionsFixture fixture;
  for (int i = 0; i < 5; ++i) {
    fixture.raw->append({"acme", "user:u1", "s" + std::to_string(i)},
                        turn("  question\n number " + std::to_string(i)), true);
  }
  fixture.raw->append({"acme", "user:u2", "other"}, turn("not yours"), true);
  auto list = fixture.answer("/v1/sessions", "GET", fixture.call("u1"));
  EXPECT_EQ(list["object"], "list");
  EXPECT_EQ(list["has_more"], false);
  auto& data = list["data"].as_array();
  ASSERT_EQ(data.size(), 5u);
  auto& newest = data[0].as_object();
  EXPECT_EQ(newest["id"], "s4");
  EXPECT_EQ(newest["object"], "session");
  EXPECT_EQ(newest["title"], "question number 4");
  EXPECT_EQ(newest["turns"], 1);
  EXPECT_GT(newest["created_at"].as_int64(), 0);
  EXPECT_EQ(newest["updated_at"], newest["created_at"]);

  auto first = fixture.answer("/v1/sessions", "GET", fixture.call("u1", "limit=2"));
  EXPECT_EQ(first["has_more"], true);
  ASSERT_EQ(first["data"].as_array().size(), 2u);
  auto second = fixture.answer("/v1/sessions", "GET", fixture.call("u1", "limit=2&after=s3"));
  EXPECT_EQ(second["data"].as_array()[0].as_object()["id"], "s2");
  EXPECT_EQ(fixture.refusal("/v1/sessions", "GET", fixture.call("u1", "after=other")).param,
            "after");

  auto theirs = fixture.answer("/v1/sessions", "GET", fixture.call("u2"));
  ASSERT_EQ(theirs["data"].as_array().size(), 1u);
  EXPECT_EQ(theirs["data"].as_array()[0].as_object()["id"], "other");
  // Only an admin names another owner.
  EXPECT_EQ(fixture.refusal("/v1/sessions", "GET", fixture.call("u2", "user=u1")).status, 403);
  RouteCall admin = fixture.call("ops", "user=u1&limit=1");
  admin.caller.roles = {"admin"};
  EXPECT_EQ(fixture.answer("/v1/sessions", "GET", admin)["data"].as_array().size(), 1u);
}

TEST(Routes, SessionListLimitIsOneToTwoHundred) {
  SessionsFixture fixture;
  for (const char* bad : {"limit=0", "limit=201", "limit=-1", "limit=ten", "limit=", "limit=5x",
                          "limit=1000000000000000000000", "limit"}) {
    RequestError error = fixture.refusal("/v1/sessions", "GET", fixture.call("u1", bad));
    EXPECT_EQ(error.status, 400) << bad;
    EXPECT_EQ(error.param, "limit") << bad;
  }
  for (const char* good : {"limit=1", "limit=200", "limit=50"}) {
    auto list = fixture.answer("/v1/sessions", "GET", fixture.call("u1", good));
    EXPECT_EQ(list["data"].as_array().size(), 0u);
  }
}

TEST(Routes, RenameAndDeleteTouchOnlyTheCallersSession) {
  SessionsFixture fixture;
  fixture.raw->append({"acme", "user:u1", "s1"}, turn("hello there"), true);
  RouteCall rename = fixture.call("u1");
  rename.body = R"({"title": "  Greetings  "})";
  auto renamed = fixture.answer("/v1/sessions/s1", "PATCH", rename);
  EXPECT_EQ(renamed["id"], "s1");
  EXPECT_EQ(renamed["object"], "session");
  EXPECT_EQ(renamed["title"], "Greetings");
  EXPECT_EQ(renamed["turns"], 1);

  RouteCall stranger = fixture.call("u2");
  stranger.body = rename.body;
  EXPECT_EQ(fixture.refusal("/v1/sessions/s1", "PATCH", stranger).code, "session_not_found");
  EXPECT_EQ(fixture.refusal("/v1/sessions/s1", "DELETE", fixture.call("u2")).code,
            "session_not_found");

  for (const char* body : {R"({"title": ""})", R"({"title": "   "})", R"({"title": 5})", "{}",
                           "not json", R"(["title"])"}) {
    rename.body = body;
    EXPECT_EQ(fixture.refusal("/v1/sessions/s1", "PATCH", rename).status, 400) << body;
  }
  rename.body = R"({"title": ")" + std::string(201, 'x') + R"("})";
  EXPECT_EQ(fixture.refusal("/v1/sessions/s1", "PATCH", rename).param, "title");
  rename.body = R"({"title": ")" + std::string(200, 'x') + R"("})";
  EXPECT_EQ(fixture.answer("/v1/sessions/s1", "PATCH", rename)["title"].as_string(),
            std::string(200, 'x'));
  rename.body = R"({"title": "ok", "pinned": true})";
  RequestError extra = fixture.refusal("/v1/sessions/s1", "PATCH", rename);
  EXPECT_EQ(extra.code, "unsupported_parameter");
  EXPECT_EQ(extra.param, "pinned");

  auto deleted = fixture.answer("/v1/sessions/s1", "DELETE", fixture.call("u1"));
  EXPECT_EQ(boost::json::serialize(deleted),
            R"({"id":"s1","object":"session.deleted","deleted":true})");
  EXPECT_EQ(fixture.refusal("/v1/sessions/s1", "GET", fixture.call("u1")).status, 404);
  EXPECT_EQ(fixture.refusal("/v1/sessions/s1", "DELETE", fixture.call("u1")).status, 404);
  EXPECT_TRUE(fixture.answer("/v1/sessions", "GET", fixture.call("u1"))["data"].as_array().empty());
}

TEST(Routes, SessionIdsArriveUrlEncoded) {
  SessionsFixture fixture;
  fixture.raw->append({"acme", "user:u1", "my chat/ü 100%"}, turn("hi"), true);
  fixture.raw->append({"acme", "user:u1", "later"}, turn("hi"), true);
  const std::string path = "/v1/sessions/my%20chat%2F%C3%BC%20100%25";
  EXPECT_EQ(fixture.answer(path, "GET", fixture.call("u1"))["id"], "my chat/ü 100%");
  RouteCall rename = fixture.call("u1");
  rename.body = R"({"title": "Encoded"})";
  EXPECT_EQ(fixture.answer(path, "PATCH", rename)["id"], "my chat/ü 100%");
  auto page = fixture.answer("/v1/sessions", "GET", fixture.call("u1", "after=later"));
  EXPECT_EQ(page["data"].as_array().at(0).as_object()["title"], "Encoded");
  auto same = fixture.answer("/v1/sessions", "GET",
                             fixture.call("u1", "after=my%20chat%2F%C3%BC%20100%25"));
  EXPECT_TRUE(same["data"].as_array().empty());
  EXPECT_EQ(fixture.answer(path, "DELETE", fixture.call("u1"))["id"], "my chat/ü 100%");
  // A '%' that starts no escape is itself.
  fixture.raw->append({"acme", "user:u1", "50%"}, turn("hi"), true);
  EXPECT_EQ(fixture.answer("/v1/sessions/50%", "GET", fixture.call("u1"))["id"], "50%");
}

TEST(Routes, SessionRoutesWithoutAHistoryStoreAre404) {
  ServedPipeline served;
  std::string parameter;
  for (const char* method : {"GET", "PATCH", "DELETE"}) {
    RouteCall call = call_on(served);
    call.body = R"({"title": "x"})";
    try {
      route_for_method(*find_route("/v1/sessions/s1", parameter), method).endpoint(call);
      ADD_FAILURE() << method;
    } catch (const RequestFailure& failure) {
      EXPECT_EQ(failure.error().status, 404) << method;
    }
  }
  EXPECT_THROW(find_route("/v1/sessions", parameter)->endpoint(call_on(served)), RequestFailure);
}

TEST(Routes, DashboardIsForAdminsAndDrawsTheServedPipeline) {
  auto pipeline = testing::build_yaml(R"(version: 1
name: drawn
stages:
  - {name: greet, type: echo}
  - {name: shout, type: uppercase}
  - {name: emit, type: sse_emit}
)",
                                      builtin_registry());
  ASSERT_TRUE(pipeline);
  ServedPipeline served;
  served.pipeline = std::move(pipeline);
  FakeAuthenticator authenticator;
  served.authenticator = &authenticator;
  std::string parameter;
  const Route* graph = find_route("/v1/dashboard/graph.svg", parameter);
  const Route* summary = find_route("/v1/dashboard/summary", parameter);
  ASSERT_NE(graph, nullptr);
  ASSERT_NE(summary, nullptr);
  RouteCall call = call_on(served);
  for (const Route* route : {graph, summary}) {
    EXPECT_EQ(route->access, Access::admin);
    try {
      require_admin(*route, call);
      ADD_FAILURE() << route->pattern;
    } catch (const RequestFailure& failure) {
      EXPECT_EQ(failure.error().status, 403);
      EXPECT_EQ(failure.error().message, "only admins may open the dashboard");
    }
  }
  call.caller.roles = {"admin"};
  EXPECT_NO_THROW(require_admin(*graph, call));
  Response svg = graph->endpoint(call);
  EXPECT_EQ(svg.content_type, "image/svg+xml; charset=utf-8");
  for (const char* stage : {"greet", "shout", "emit"}) {
    EXPECT_NE(svg.body.find("<g class=\"stage\" data-stage=\"" + std::string(stage) + "\""),
              std::string::npos)
        << stage;
  }
  auto body = boost::json::parse(summary->endpoint(call).body).as_object();
  EXPECT_EQ(body["pipeline"], "drawn");
  EXPECT_TRUE(body["model"].is_null());
  auto& stages = body["stages"].as_array();
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[1].as_object()["name"], "shout");
  EXPECT_EQ(stages[1].as_object()["type"], "uppercase");
  EXPECT_EQ(stages[1].as_object()["kind"], "stream");
  EXPECT_EQ(stages[1].as_object()["depth"], 1);
  EXPECT_EQ(stages[2].as_object()["outputs"].as_array()[0].as_object()["to"], "sink");
  EXPECT_EQ(body["metrics"].as_object()["stage_duration"], "chatflow:stage_duration_seconds");
  EXPECT_TRUE(body["arms"].as_array().empty());
}

}  // namespace
}  // namespace chatflow::server
