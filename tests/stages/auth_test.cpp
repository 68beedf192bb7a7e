// The auth stage in front of echo: API keys from a keys file written by the key store (as
// `chatflow keys add` writes it), HS256 JWTs, and model access by role. The credential comes in
// the request's header fields, as the HTTP server passes them on.
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

#include "framework/api/capabilities.h"
#include "framework/security/crypto.h"
#include "framework/security/key_store.h"
#include "support/pipeline_helpers.h"
#include "support/redis_server.h"
#include "support/signing_keys.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

const std::string kSecret = "a-shared-secret-of-at-least-thirty-two-bytes";

struct Keys {
  std::string path;
  std::string alice;  // acme/alice, admin, rpm 60
  std::string bob;    // globex/bob, basic
};

// A keys file as `chatflow keys add` leaves it: hashes only, one record per key.
Keys write_keys(const std::string& name) {
  Keys keys;
  keys.path = temp_path(name);
  security::KeyStore store;
  keys.alice = store.add("acme", "alice", {"admin"}, {{"rpm", 60}});
  keys.bob = store.add("globex", "bob", {"basic"}, {});
  store.save(keys.path);
  return keys;
}

std::unique_ptr<Pipeline> guarded_echo(const std::string& auth_config) {
  return build_yaml("version: 1\nstages:\n  - {name: auth, type: auth, config: " + auth_config +
                        "}\n  - {name: echo, type: echo}\n",
                    builtin_registry());
}

std::unique_ptr<Pipeline> keys_and_jwt(const Keys& keys) {
  return guarded_echo("{keys_file: \"" + keys.path + "\", jwt: {algorithm: HS256, secret: \"" +
                      kSecret +
                      "\", issuer: https://login.example, audience: chatflow}, model_access: "
                      "{admin: \"*\", basic: \"some-other-model\"}}");
}

// Runs "hello" with these header fields for model "test-model"; the request comes back.
std::shared_ptr<Request> ask(Pipeline& pipeline, HeaderFields headers, std::string* text) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("hello", sink);
  request->model = "test-model";
  request->headers = std::move(headers);
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  if (text) *text = sink->text();
  return request;
}

std::string hs256_token(const std::string& claims, const std::string& secret = kSecret) {
  std::string signed_part = security::base64url_encode(R"({"alg":"HS256","typ":"JWT"})") + "." +
                            security::base64url_encode(claims);
  return signed_part + "." + security::base64url_encode(security::hmac_sha256(secret, signed_part));
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string claims(int64_t expires) {
  return R"({"iss":"https://login.example","aud":"chatflow","sub":"carol","tenant":"initech",)"
         R"("roles":["admin"],"exp":)" +
         std::to_string(expires) + "}";
}

void expect_authentication_error(const Request& request, const std::string& code) {
  ASSERT_TRUE(request.error());
  EXPECT_EQ(request.error()->status, 401);
  EXPECT_EQ(request.error()->type, "authentication_error");
  EXPECT_EQ(request.error()->code, code) << request.error()->message;
}

TEST(Auth, AMissingKeyIs401MissingApiKeyAndNothingIsAnswered) {
  Keys keys = write_keys("auth-missing-keys.yaml");
  auto pipeline = keys_and_jwt(keys);
  ASSERT_TRUE(pipeline);
  std::string text = "unset";
  auto request = ask(*pipeline, {{"content-type", "application/json"}}, &text);
  expect_authentication_error(*request, "missing_api_key");
  EXPECT_NE(request->error()->message.find("Authorization: Bearer"), std::string::npos)
      << request->error()->message;
  EXPECT_EQ(text, "") << "echo answered an unauthenticated request";
}

TEST(Auth, AKeyFromTheKeysFileSetsTheCallersIdentity) {
  Keys keys = write_keys("auth-identity-keys.yaml");
  auto pipeline = keys_and_jwt(keys);
  ASSERT_TRUE(pipeline);
  for (const HeaderFields& headers : {HeaderFields{{"authorization", "Bearer " + keys.alice}},
                                      HeaderFields{{"x-api-key", keys.alice}}}) {
    std::string text;
    auto request = ask(*pipeline, headers, &text);
    ASSERT_FALSE(request->error()) << headers[0].first << ": " << request->error()->message;
    EXPECT_EQ(text, "hello");
    EXPECT_EQ(request->identity.tenant, "acme");
    EXPECT_EQ(request->identity.user, "alice");
    EXPECT_EQ(request->identity.roles, std::vector<std::string>{"admin"});
    EXPECT_EQ(request->identity.limits, (std::map<std::string, double>{{"rpm", 60}}));
  }
}

TEST(Auth, AWrongOrMalformedCredentialIs401InvalidApiKey) {
  Keys keys = write_keys("auth-wrong-keys.yaml");
  auto pipeline = keys_and_jwt(keys);
  ASSERT_TRUE(pipeline);
  std::string one_digit_off = keys.alice;
  one_digit_off.back() = one_digit_off.back() == '0' ? '1' : '0';
  for (const HeaderFields& headers : {
           HeaderFields{{"authorization", "Bearer " + one_digit_off}},
           HeaderFields{{"x-api-key", keys.alice + "x"}},
           HeaderFields{{"authorization", "Basic YTpi"}},
           // Authorization wins over x-api-key: a bad bearer is not rescued by a good key.
           HeaderFields{{"x-api-key", keys.alice}, {"authorization", "Bearer cf-nonsense"}},
       }) {
    auto request = ask(*pipeline, headers, nullptr);
    expect_authentication_error(*request, "invalid_api_key");
    EXPECT_EQ(request->identity.tenant, "");
  }
}

TEST(Auth, ARevokedKeyIsRefusedAndTheOthersStillWork) {
  Keys keys = write_keys("auth-revoked-keys.yaml");
  Diagnostics diagnostics;
  auto store = security::KeyStore::load(keys.path, diagnostics);
  ASSERT_TRUE(store) << diagnostics.to_string();
  ASSERT_TRUE(store->revoke(store->match(keys.alice)->id));
  store->save(keys.path);
  auto pipeline = guarded_echo("{keys_file: \"" + keys.path + "\"}");
  ASSERT_TRUE(pipeline);
  expect_authentication_error(*ask(*pipeline, {{"x-api-key", keys.alice}}, nullptr),
                              "invalid_api_key");
  auto request = ask(*pipeline, {{"x-api-key", keys.bob}}, nullptr);
  EXPECT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(request->identity.tenant, "globex");
}

TEST(Auth, ARoleWithoutAccessToTheModelIs403PermissionError) {
  Keys keys = write_keys("auth-access-keys.yaml");
  auto pipeline = keys_and_jwt(keys);
  ASSERT_TRUE(pipeline);
  std::string text = "unset";
  auto refused = ask(*pipeline, {{"authorization", "Bearer " + keys.bob}}, &text);
  ASSERT_TRUE(refused->error());
  EXPECT_EQ(refused->error()->status, 403);
  EXPECT_EQ(refused->error()->type, "permission_error");
  EXPECT_EQ(refused->error()->code, "model_not_allowed");
  EXPECT_EQ(refused->error()->param, "model");
  EXPECT_NE(refused->error()->message.find("'test-model'"), std::string::npos);
  EXPECT_EQ(text, "");
  // The admin role has "*".
  EXPECT_FALSE(ask(*pipeline, {{"authorization", "Bearer " + keys.alice}}, nullptr)->error());
}

TEST(Auth, AValidJwtSetsTheIdentityAndABadOneIs401InvalidToken) {
  Keys keys = write_keys("auth-jwt-keys.yaml");
  auto pipeline = keys_and_jwt(keys);
  ASSERT_TRUE(pipeline);
  int64_t now = unix_now();
  auto good =
      ask(*pipeline, {{"authorization", "Bearer " + hs256_token(claims(now + 300))}}, nullptr);
  ASSERT_FALSE(good->error()) << good->error()->message;
  EXPECT_EQ(good->identity.tenant, "initech");
  EXPECT_EQ(good->identity.user, "carol");
  EXPECT_EQ(good->identity.roles, std::vector<std::string>{"admin"});

  std::string alg_none = security::base64url_encode(R"({"alg":"none"})") + "." +
                         security::base64url_encode(claims(now + 300)) + ".";
  for (const auto& [token, why] : std::vector<std::pair<std::string, std::string>>{
           {hs256_token(claims(now - 120)), "expired"},  // past the 30 s leeway
           {hs256_token(claims(now + 300), "not-the-secret-not-the-secret-not-the"), "signature"},
           {alg_none, "HS256"},
       }) {
    auto request = ask(*pipeline, {{"authorization", "Bearer " + token}}, nullptr);
    expect_authentication_error(*request, "invalid_token");
    EXPECT_NE(request->error()->message.find(why), std::string::npos)
        << why << ": " << request->error()->message;
  }
}

TEST(Auth, AMissingKeysFileIsCreatedWithOneDevelopmentKeyThatWorks) {
  std::string path = fresh_path("auth-created-keys.yaml");
  ASSERT_FALSE(std::filesystem::exists(path));
  auto pipeline = guarded_echo("{keys_file: \"" + path + "\", create_keys_file: true}");
  ASSERT_TRUE(pipeline);
  EXPECT_TRUE(std::filesystem::exists(path));
  auto* authenticator = pipeline->find<Authenticator>();
  ASSERT_NE(authenticator, nullptr);
  std::optional<std::string> key = authenticator->new_development_key();
  ASSERT_TRUE(key);
  EXPECT_EQ(key->rfind("cf-", 0), 0u) << *key;
  auto request = ask(*pipeline, {{"authorization", "Bearer " + *key}}, nullptr);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(request->identity.tenant, "dev");
  EXPECT_TRUE(request->identity.has_role("admin"));
}

TEST(Auth, AMissingKeysFileWithoutCreateIsAConfigErrorNamingTheCommand) {
  std::string path = fresh_path("auth-absent-keys.yaml");
  Diagnostics diagnostics;
  auto spec =
      check_yaml("version: 1\nstages:\n  - {name: auth, type: auth, config: {keys_file: \"" + path +
                     "\"}}\n  - {name: echo, type: echo}\n",
                 builtin_registry(), diagnostics);
  ASSERT_TRUE(spec) << all_errors(diagnostics);
  EXPECT_FALSE(Pipeline::build(std::move(*spec), diagnostics));
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:3:"), std::string::npos) << errors;
  EXPECT_NE(errors.find("does not exist"), std::string::npos) << errors;
  EXPECT_NE(errors.find("chatflow keys add"), std::string::npos) << errors;
  EXPECT_FALSE(std::filesystem::exists(path));
}

// The pipeline's config error for `auth_config`, all of it.
std::string config_errors(const std::string& auth_config) {
  Diagnostics diagnostics;
  auto spec =
      check_yaml("version: 1\nstages:\n  - {name: auth, type: auth, config: " + auth_config +
                     "}\n  - {name: echo, type: echo}\n",
                 builtin_registry(), diagnostics);
  if (spec) {
    EXPECT_FALSE(Pipeline::build(std::move(*spec), diagnostics)) << auth_config;
  }
  return all_errors(diagnostics);
}

std::string jwt_claims() {
  return R"({"sub":"erin","tenant":"umbrella","roles":["admin"],"aud":"chatflow","exp":)" +
         std::to_string(unix_now() + 300) + "}";
}

TEST(Auth, AKeySetFileVerifiesTokensByKidAndIsReadAgainForAnUnknownOne) {
  testing::SigningKey first("RS256", "file-1");
  testing::SigningKey second("ES256", "file-2");
  std::string path = write_temp_file("auth-jwks.json", testing::key_set({first.jwk()}));
  auto pipeline = guarded_echo("{jwt: {jwks_file: \"" + path +
                               "\", jwks_min_refresh_s: 1, audience: chatflow}}");
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));  // unknown kids may fetch now
  ASSERT_TRUE(pipeline);
  auto good = ask(*pipeline, {{"authorization", "Bearer " + first.sign(jwt_claims())}}, nullptr);
  ASSERT_FALSE(good->error()) << good->error()->message;
  EXPECT_EQ(good->identity.tenant, "umbrella");
  EXPECT_EQ(good->identity.user, "erin");
  auto unknown =
      ask(*pipeline, {{"authorization", "Bearer " + second.sign(jwt_claims())}}, nullptr);
  expect_authentication_error(*unknown, "invalid_token");
  ASSERT_TRUE(unknown->error());
  EXPECT_NE(unknown->error()->message.find("'file-2' is not in the key set"), std::string::npos)
      << unknown->error()->message;
  // Rotated in the file: the unknown kid reads it again (a second after the last read).
  std::ofstream(path, std::ios::trunc) << testing::key_set({second.jwk()});
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  auto rotated =
      ask(*pipeline, {{"authorization", "Bearer " + second.sign(jwt_claims())}}, nullptr);
  EXPECT_FALSE(rotated->error()) << rotated->error()->message;
  // API keys are not accepted by a pipeline that only takes JWTs.
  expect_authentication_error(*ask(*pipeline, {{"x-api-key", "cf-0123"}}, nullptr),
                              "invalid_api_key");
}

TEST(Auth, KeySetConfigurationsThatCannotWorkAreConfigErrors) {
  testing::SigningKey key("RS256", "k");
  std::string file = write_temp_file("auth-jwks-config.json", testing::key_set({key.jwk()}));
  std::string pem = write_temp_file("auth-jwks-config.pem", key.public_pem());
  for (const auto& [config, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{jwt: {jwks_url: \"http://login.example/jwks.json\", audience: a}}",
            "plain http to another host"},
           {"{jwt: {jwks_url: \"ftp://login.example/jwks.json\", audience: a}}",
            "is not an http:// or https://"},
           {"{jwt: {jwks_file: \"" + file + "\", jwks_url: \"https://login.example/j\"}}",
            "set one of jwt.jwks_url and jwt.jwks_file"},
           {"{jwt: {algorithm: HS256, secret: \"" + kSecret + "\", jwks_file: \"" + file + "\"}}",
            "cannot be used with a key set"},
           {"{jwt: {algorithm: HS256, jwks_file: \"" + file + "\"}}",
            "a key set holds public keys"},
           {"{jwt: {algorithm: RS256, public_key_file: \"" + pem + "\", jwks_file: \"" + file +
                "\"}}",
            "cannot be used with a key set"},
           {"{jwt: {jwks_file: \"" + file + "\", jwks_ca_file: \"" + pem + "\"}}",
            "jwks_ca_file is for jwks_url"},
           {"{jwt: {jwks_file: \"" + fresh_path("auth-no-such-jwks.json") + "\", audience: a}}",
            "cannot read"},
           {"{jwt: {algorithm: ES256, jwks_file: \"" + file + "\", audience: a}}",
            "holds no key chatflow can verify tokens with"},
           {"{jwt: {jwks_file: \"" + file + "\", jwks_min_refresh_s: 0, audience: a}}",
            "jwks_min_refresh_s"},
       }) {
    std::string errors = config_errors(config);
    EXPECT_NE(errors.find(expected), std::string::npos) << config << "\n" << errors;
  }
}

TEST(Auth, AKeySetUrlThatDoesNotAnswerStopsTheStartNamingIt) {
  std::string url = "http://127.0.0.1:" + std::to_string(testing::free_port()) + "/jwks.json";
  std::string errors =
      config_errors("{jwt: {jwks_url: \"" + url + "\", jwks_timeout_ms: 500, audience: a}}");
  EXPECT_NE(errors.find("the key set at " + url + " cannot be used"), std::string::npos) << errors;
}

TEST(Auth, AnEmptyKeysFileIsAnErrorAtStartUnlessAllowed) {
  std::string path = write_temp_file("auth-empty-keys.yaml", "keys: []\n");
  std::string errors = config_errors("{keys_file: \"" + path + "\"}");
  EXPECT_NE(errors.find("holds no keys"), std::string::npos) << errors;
  EXPECT_NE(errors.find("allow_empty_keys_file"), std::string::npos) << errors;
  auto allowed = guarded_echo("{keys_file: \"" + path + "\", allow_empty_keys_file: true}");
  ASSERT_TRUE(allowed);
  expect_authentication_error(*ask(*allowed, {{"x-api-key", "cf-0123"}}, nullptr),
                              "invalid_api_key");
}

TEST(Auth, AKeysFileEmptiedWhileServingIsRefusedAndTheKeysStillWork) {
  Keys keys = write_keys("auth-emptied-keys.yaml");
  auto pipeline = guarded_echo("{keys_file: \"" + keys.path + "\"}");
  ASSERT_TRUE(pipeline);
  ASSERT_FALSE(ask(*pipeline, {{"x-api-key", keys.alice}}, nullptr)->error());
  std::ofstream(keys.path, std::ios::trunc) << "";
  // The file is looked at again once a second.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto after = ask(*pipeline, {{"x-api-key", keys.alice}}, nullptr);
  EXPECT_FALSE(after->error()) << "an emptied keys file locked alice out: "
                               << after->error()->message;
  EXPECT_FALSE(ask(*pipeline, {{"x-api-key", keys.bob}}, nullptr)->error());
}
// A provider's keys sign the tokens of every application it serves: with a key set the audience
// must be checked, unless the configuration says the set signs chatflow's tokens alone (and
// names their issuer).
TEST(Auth, AKeySetWithoutAnAudienceIsAConfigErrorNamingTheKey) {
  testing::SigningKey key("RS256", "k");
  std::string file = write_temp_file("auth-jwks-audience.json", testing::key_set({key.jwk()}));
  for (const auto& [config, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{jwt: {jwks_file: \"" + file + "\"}}", "jwt.audience is required with a key set"},
           {"{jwt: {jwks_file: \"" + file + "\", issuer: https://login.example}}",
            "a token the provider issued to any other application is accepted"},
           {"{jwt: {jwks_file: \"" + file + "\", allow_any_audience: true}}",
            "jwt.allow_any_audience needs jwt.issuer"},
           {"{jwt: {jwks_file: \"" + file +
                "\", issuer: https://login.example, audience: x, allow_any_audience: true}}",
            "contradict each other"},
           {"{jwt: {algorithm: HS256, secret: \"" + kSecret + "\", allow_any_audience: true}}",
            "jwt.allow_any_audience is for a key set"},
       }) {
    std::string errors = config_errors(config);
    EXPECT_NE(errors.find("test.yaml:3:"), std::string::npos) << config << "\n" << errors;
    EXPECT_NE(errors.find(expected), std::string::npos) << config << "\n" << errors;
  }
  // Named issuer, any audience: a token for another app of that issuer passes, another
  // issuer's does not.
  auto pipeline = guarded_echo("{jwt: {jwks_file: \"" + file +
                               "\", issuer: https://login.example, allow_any_audience: true}}");
  ASSERT_TRUE(pipeline);
  std::string claims = R"({"sub":"erin","tenant":"umbrella","aud":"another-app",)"
                       R"("iss":"https://login.example","exp":)" +
                       std::to_string(unix_now() + 300) + "}";
  EXPECT_FALSE(ask(*pipeline, {{"authorization", "Bearer " + key.sign(claims)}}, nullptr)->error());
  std::string elsewhere = R"({"sub":"erin","tenant":"umbrella","aud":"another-app",)"
                          R"("iss":"https://elsewhere.example","exp":)" +
                          std::to_string(unix_now() + 300) + "}";
  expect_authentication_error(
      *ask(*pipeline, {{"authorization", "Bearer " + key.sign(elsewhere)}}, nullptr),
      "invalid_token");
}

TEST(Auth, ATokenWithoutItsUserClaimIs401) {
  Keys keys = write_keys("auth-no-user-keys.yaml");
  auto pipeline = keys_and_jwt(keys);
  ASSERT_TRUE(pipeline);
  std::string no_user = R"({"iss":"https://login.example","aud":"chatflow","tenant":"initech",)"
                        R"("roles":["admin"],"exp":)" +
                        std::to_string(unix_now() + 300) + "}";
  auto request = ask(*pipeline, {{"authorization", "Bearer " + hs256_token(no_user)}}, nullptr);
  expect_authentication_error(*request, "invalid_token");
  ASSERT_TRUE(request->error());
  EXPECT_NE(request->error()->message.find("no 'sub' claim naming the user"), std::string::npos)
      << request->error()->message;
}

// With user_claim "" tokens name no user: such callers own nothing, so a session (which would
// be shared by all of them) is refused.
TEST(Auth, ACallerWithoutAUserCannotKeepASession) {
  auto pipeline = guarded_echo("{jwt: {algorithm: HS256, secret: \"" + kSecret +
                               "\", audience: chatflow, user_claim: \"\"}}");
  ASSERT_TRUE(pipeline);
  std::string token = hs256_token(R"({"aud":"chatflow","tenant":"initech","exp":)" +
                                  std::to_string(unix_now() + 300) + "}");
  std::shared_ptr<CollectingSink> sink;
  auto plain = ask(*pipeline, {{"authorization", "Bearer " + token}}, nullptr);
  ASSERT_FALSE(plain->error()) << plain->error()->message;
  EXPECT_EQ(plain->identity.tenant, "initech");
  EXPECT_EQ(plain->identity.owner(), "");
  auto request = user_request("hello", sink);
  request->model = "test-model";
  request->session_id = "shared";
  request->headers = {{"authorization", "Bearer " + token}};
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 403);
  EXPECT_EQ(request->error()->code, "no_session_owner");
  EXPECT_EQ(request->error()->param, "session_id");
  EXPECT_EQ(sink->text(), "");
}

// The auth stage waits for a key set fetch deferred: a request whose unknown kid asked for the
// set holds no pipeline thread (on a 2-core machine the graph's arena has one worker), so
// another caller is answered while it waits, and it passes once the rotated set has come.
TEST(Auth, AnUnknownKidWaitsForTheFetchWithoutHoldingAPipelineThread) {
  testing::SigningKey first("RS256", "slow-1");
  testing::SigningKey second("ES256", "slow-2");
  std::string path = write_temp_file("auth-jwks-slow.json", testing::key_set({first.jwk()}));
  auto pipeline = guarded_echo("{jwt: {jwks_file: \"" + path +
                               "\", jwks_min_refresh_s: 1, audience: chatflow}}");
  ASSERT_TRUE(pipeline);
  // The next read of the set blocks until the test writes the rotated set: a slow provider.
  std::string fifo = path + ".fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::rename(fifo, path);
  // Should the test stop early, the blocked read gets an end of file, so the pipeline can go.
  struct Unblock {
    std::string path;
    ~Unblock() {
      int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  } unblock{path};
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));

  std::shared_ptr<CollectingSink> waiting_sink;
  auto waiting = user_request("rotated", waiting_sink);
  waiting->model = "test-model";
  waiting->headers = {{"authorization", "Bearer " + second.sign(jwt_claims())}};
  ASSERT_EQ(pipeline->submit(waiting), Admission::accepted);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // it reaches the stage, asks
  EXPECT_FALSE(waiting_sink->wait(std::chrono::milliseconds(0))) << "answered before the set came";

  for (int i = 0; i < 4; ++i) {
    std::shared_ptr<CollectingSink> sink;
    auto other = user_request("known", sink);
    other->model = "test-model";
    other->headers = {{"authorization", "Bearer " + first.sign(jwt_claims())}};
    ASSERT_EQ(pipeline->submit(other), Admission::accepted);
    ASSERT_TRUE(sink->wait(std::chrono::seconds(3))) << "another caller waited for the key set";
    EXPECT_FALSE(other->error()) << other->error()->message;
    EXPECT_EQ(sink->text(), "known");
  }

  std::ofstream(path) << testing::key_set({first.jwk(), second.jwk()});
  ASSERT_TRUE(waiting_sink->wait());
  EXPECT_FALSE(waiting->error()) << waiting->error()->message;
  EXPECT_EQ(waiting_sink->text(), "rotated");
  EXPECT_EQ(waiting->identity.tenant, "umbrella");
}

// What the server asks on its I/O thread never waits: an unknown kid that may fetch leaves the
// decision to the stage (nullopt), or, where nothing can wait, is a 401 that says to retry.
TEST(Auth, TheServersHeaderCheckNeverWaits) {
  testing::SigningKey first("RS256", "hdr-1");
  testing::SigningKey second("RS256", "hdr-2");
  std::string path = write_temp_file("auth-jwks-header.json", testing::key_set({first.jwk()}));
  auto pipeline = guarded_echo("{jwt: {jwks_file: \"" + path +
                               "\", jwks_min_refresh_s: 1, audience: chatflow}}");
  ASSERT_TRUE(pipeline);
  auto* authenticator = pipeline->find<Authenticator>();
  ASSERT_NE(authenticator, nullptr);
  HeaderFields known = {{"authorization", "Bearer " + first.sign(jwt_claims())}};
  HeaderFields unknown = {{"authorization", "Bearer " + second.sign(jwt_claims())}};
  ASSERT_TRUE(authenticator->authenticate_or_defer(known));
  EXPECT_EQ(authenticator->authenticate_or_defer(known)->tenant, "umbrella");
  // Within jwks_min_refresh_s of the start's fetch no fetch may come: refused at once.
  EXPECT_THROW(authenticator->authenticate_or_defer(unknown), RequestFailure);
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  EXPECT_FALSE(authenticator->authenticate_or_defer(unknown)) << "the stage should decide";
  // Where nothing can wait (routes outside the pipeline): the fetch is asked for, the caller
  // told to retry.
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  try {
    authenticator->authenticate(unknown);
    ADD_FAILURE() << "an unknown kid was accepted";
  } catch (const RequestFailure& failure) {
    EXPECT_EQ(failure.error().status, 401);
    EXPECT_NE(failure.error().message.find("retry"), std::string::npos) << failure.error().message;
  }
}
}  // namespace
}  // namespace chatflow::testing
