// The rate_limit stage in front of echo: request and token buckets per tenant, per user or key
// and per client address, the x-ratelimit-* headers and Retry-After it puts on the response,
// and the settlement of reserved tokens when a request is released. Token limits count the
// prompt with a tiny made-up model.
#include <condition_variable>
#include <mutex>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "framework/security/key_store.h"
#include "support/pipeline_helpers.h"
#include "support/redis_server.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

// What the caller saw of one request, read after it was released.
struct Answer {
  std::optional<RequestError> error;
  HeaderFields headers;
  std::string text;

  std::optional<std::string> header(const std::string& name) const {
    for (const auto& [field, value] : headers) {
      if (field == name) return value;
    }
    return std::nullopt;
  }
};

struct Caller {
  std::string tenant;
  std::string user;
  HeaderFields headers;      // credentials, when an auth stage decides who calls
  std::string address = {};  // the client's address, as the server resolved it
};

Answer ask(Pipeline& pipeline, const Caller& caller, int64_t max_tokens = 16) {
  std::shared_ptr<CollectingSink> collected;
  auto request = user_request("hello there", collected);
  auto watcher = std::make_shared<ReleaseWatchingSink>(collected);
  request->sink = watcher;
  request->identity.tenant = caller.tenant;
  request->identity.user = caller.user;
  request->headers = caller.headers;
  request->client_address = caller.address;
  request->generation.max_tokens = max_tokens;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(collected->wait());
  Answer answer{request->error(), request->response_headers(), collected->text()};
  request.reset();
  EXPECT_TRUE(watcher->wait_released());
  return answer;
}

std::string model_path() {
  engine::ModelShape shape;
  shape.ffn = 96;
  shape.context = 1024;
  shape.type = kernels::TensorType::q8_0;
  return temp_model(shape);
}

std::unique_ptr<Pipeline> limited_echo(const std::string& limits_config) {
  return build_yaml("version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() +
                        "\"}\nstages:\n  - {name: limits, type: rate_limit, config: " +
                        limits_config + "}\n  - {name: echo, type: echo}\n",
                    builtin_registry());
}

void expect_rate_limited(const Answer& answer, const std::string& kind) {
  ASSERT_TRUE(answer.error) << "not limited";
  EXPECT_EQ(answer.error->status, 429);
  EXPECT_EQ(answer.error->type, kind);
  EXPECT_EQ(answer.error->code, "rate_limit_exceeded");
  EXPECT_EQ(answer.text, "") << "a limited request was answered";
}

TEST(RateLimit, OverTheRequestLimitIs429WithRetryAfter) {
  auto pipeline = limited_echo("{rpm: 2}");
  ASSERT_TRUE(pipeline);
  Caller acme{"acme", "alice", {}};
  Answer first = ask(*pipeline, acme);
  ASSERT_FALSE(first.error) << first.error->message;
  EXPECT_EQ(first.text, "hello there");
  EXPECT_EQ(first.header("x-ratelimit-limit-requests"), "2");
  EXPECT_EQ(first.header("x-ratelimit-remaining-requests"), "1");
  // Two requests a minute refill one every 30 s.
  EXPECT_EQ(first.header("x-ratelimit-reset-requests"), "30s");
  EXPECT_FALSE(first.header("x-ratelimit-limit-tokens")) << "no token limit is configured";
  EXPECT_FALSE(first.header("retry-after"));

  Answer second = ask(*pipeline, acme);
  ASSERT_FALSE(second.error) << second.error->message;
  EXPECT_EQ(second.header("x-ratelimit-remaining-requests"), "0");
  EXPECT_EQ(second.header("x-ratelimit-reset-requests"), "1m0s");

  Answer refused = ask(*pipeline, acme);
  expect_rate_limited(refused, "requests");
  EXPECT_EQ(refused.header("retry-after"), "30");
  EXPECT_NE(refused.error->message.find("retry in 30s"), std::string::npos)
      << refused.error->message;
  EXPECT_EQ(refused.header("x-ratelimit-limit-requests"), "2");
  EXPECT_EQ(refused.header("x-ratelimit-remaining-requests"), "0");
}

TEST(RateLimit, TheBucketRefillsOverItsWindow) {
  auto pipeline = limited_echo("{rpm: 1, window_s: 0.2}");
  ASSERT_TRUE(pipeline);
  Caller acme{"acme", "alice", {}};
  ASSERT_FALSE(ask(*pipeline, acme).error);
  Answer refused = ask(*pipeline, acme);
  expect_rate_limited(refused, "requests");
  EXPECT_EQ(refused.header("retry-after"), "1") << "Retry-After is whole seconds, at least 1";
  EXPECT_TRUE(std::regex_search(refused.error->message, std::regex("retry in \\d+ms$")))
      << refused.error->message;
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  Answer again = ask(*pipeline, acme);
  EXPECT_FALSE(again.error) << again.error->message;
  EXPECT_EQ(again.text, "hello there");
}

TEST(RateLimit, EachTenantHasItsOwnBuckets) {
  auto pipeline = limited_echo("{tenants: {acme: \"rpm=1\", globex: \"rpm=3\"}}");
  ASSERT_TRUE(pipeline);
  ASSERT_FALSE(ask(*pipeline, {"acme", "alice", {}}).error);
  expect_rate_limited(ask(*pipeline, {"acme", "alice", {}}), "requests");
  for (const char* remaining : {"2", "1", "0"}) {
    Answer answer = ask(*pipeline, {"globex", "bob", {}});
    ASSERT_FALSE(answer.error) << "acme's limit reached globex: " << answer.error->message;
    EXPECT_EQ(answer.header("x-ratelimit-limit-requests"), "3");
    EXPECT_EQ(answer.header("x-ratelimit-remaining-requests"), remaining);
  }
  expect_rate_limited(ask(*pipeline, {"globex", "bob", {}}), "requests");
  // A tenant not listed has the defaults: no limit, no headers.
  for (int i = 0; i < 5; ++i) {
    Answer answer = ask(*pipeline, {"initech", "carol", {}});
    ASSERT_FALSE(answer.error) << answer.error->message;
    EXPECT_FALSE(answer.header("x-ratelimit-limit-requests"));
  }
}

TEST(RateLimit, AKeysOwnRpmBeatsTheUserDefault) {
  std::string keys_file = temp_path("rate-limit-keys.yaml");
  security::KeyStore store;
  std::string limited = store.add("acme", "alice", {}, {{"rpm", 1}});
  std::string plain = store.add("acme", "bob", {}, {});
  store.save(keys_file);
  auto pipeline = build_yaml(
      "version: 1\nstages:\n  - {name: auth, type: auth, config: {keys_file: \"" + keys_file +
          "\"}}\n  - {name: limits, type: rate_limit, config: {user_rpm: 3}}\n"
          "  - {name: echo, type: echo}\n",
      builtin_registry());
  ASSERT_TRUE(pipeline);
  Caller alice{"", "", {{"authorization", "Bearer " + limited}}};
  Caller bob{"", "", {{"authorization", "Bearer " + plain}}};
  Answer first = ask(*pipeline, alice);
  ASSERT_FALSE(first.error) << first.error->message;
  EXPECT_EQ(first.header("x-ratelimit-limit-requests"), "1");
  expect_rate_limited(ask(*pipeline, alice), "requests");
  // Bob, of the same tenant, has the user default and his own bucket.
  for (const char* remaining : {"2", "1", "0"}) {
    Answer answer = ask(*pipeline, bob);
    ASSERT_FALSE(answer.error) << answer.error->message;
    EXPECT_EQ(answer.header("x-ratelimit-limit-requests"), "3");
    EXPECT_EQ(answer.header("x-ratelimit-remaining-requests"), remaining);
  }
  expect_rate_limited(ask(*pipeline, bob), "requests");
}

TEST(RateLimit, ARequestNeedingMoreThanTheWholeTokenLimitIsRefusedWithoutRetryAfter) {
  auto pipeline = limited_echo("{model: llm, tpm: 100}");
  ASSERT_TRUE(pipeline);
  Answer refused = ask(*pipeline, {"acme", "alice", {}}, /*max_tokens=*/500);
  expect_rate_limited(refused, "tokens");
  EXPECT_NE(refused.error->message.find("lower max_tokens"), std::string::npos)
      << refused.error->message;
  EXPECT_FALSE(refused.header("retry-after")) << "waiting can never help this request";
  EXPECT_EQ(refused.header("x-ratelimit-limit-tokens"), "100");
  // Nothing was taken: a small request still has the whole bucket.
  Answer small = ask(*pipeline, {"acme", "alice", {}}, /*max_tokens=*/10);
  ASSERT_FALSE(small.error) << small.error->message;
  EXPECT_EQ(small.text, "hello there");
}

TEST(RateLimit, ReservedTokensComeBackWhenTheRequestIsReleased) {
  // Each request reserves its prompt + 300 tokens of 1000; echo never reaches the model, so
  // everything goes back on release. Without the settlement the fourth would be refused.
  auto pipeline = limited_echo("{model: llm, tpm: 1000, window_s: 3600}");
  ASSERT_TRUE(pipeline);
  std::optional<std::string> first_remaining;
  for (int i = 0; i < 4; ++i) {
    Answer answer = ask(*pipeline, {"acme", "alice", {}}, /*max_tokens=*/300);
    ASSERT_FALSE(answer.error) << "request " << i << ": " << answer.error->message;
    EXPECT_EQ(answer.header("x-ratelimit-limit-tokens"), "1000");
    std::optional<std::string> remaining = answer.header("x-ratelimit-remaining-tokens");
    ASSERT_TRUE(remaining);
    if (!first_remaining) first_remaining = remaining;
    EXPECT_EQ(remaining, first_remaining) << "request " << i << " found less in the bucket";
  }
  // The prompt counts too: less than 1000 - 300 was left after the reservation.
  EXPECT_LT(std::stoi(*first_remaining), 700);
  EXPECT_GT(std::stoi(*first_remaining), 600);
}

// `keys add --rpm 1000000` used to be capped by the tenant's rpm all the same.
TEST(RateLimit, AKeysOwnRpmAboveTheTenantsIsHonouredAndLeavesTheTenantsBucketAlone) {
  std::string keys_file = temp_path("rate-limit-big-key.yaml");
  security::KeyStore store;
  std::string big = store.add("acme", "backend", {}, {{"rpm", 1000000}});
  std::string plain = store.add("acme", "alice", {}, {});
  store.save(keys_file);
  auto pipeline = build_yaml(
      "version: 1\nstages:\n  - {name: auth, type: auth, config: {keys_file: \"" + keys_file +
          "\"}}\n  - {name: limits, type: rate_limit, config: {rpm: 3}}\n"
          "  - {name: echo, type: echo}\n",
      builtin_registry());
  ASSERT_TRUE(pipeline);
  Caller backend{"", "", {{"authorization", "Bearer " + big}}};
  for (int i = 0; i < 10; ++i) {
    Answer answer = ask(*pipeline, backend);
    ASSERT_FALSE(answer.error) << "request " << i << ": " << answer.error->message;
    EXPECT_EQ(answer.header("x-ratelimit-limit-requests"), "1000000");
  }
  // The big key's ten did not come out of acme's bucket: alice still has all three.
  Caller alice{"", "", {{"authorization", "Bearer " + plain}}};
  for (const char* remaining : {"2", "1", "0"}) {
    Answer answer = ask(*pipeline, alice);
    ASSERT_FALSE(answer.error) << answer.error->message;
    EXPECT_EQ(answer.header("x-ratelimit-limit-requests"), "3");
    EXPECT_EQ(answer.header("x-ratelimit-remaining-requests"), remaining);
  }
  expect_rate_limited(ask(*pipeline, alice), "requests");
  EXPECT_FALSE(ask(*pipeline, backend).error) << "the tenant's limit reached the big key";
}

TEST(RateLimit, AKeysOwnRpmBelowTheTenantsStaysInsideTheTenantsBucket) {
  std::string keys_file = temp_path("rate-limit-small-key.yaml");
  security::KeyStore store;
  std::string small = store.add("acme", "intern", {}, {{"rpm", 2}});
  std::string plain = store.add("acme", "alice", {}, {});
  store.save(keys_file);
  auto pipeline = build_yaml(
      "version: 1\nstages:\n  - {name: auth, type: auth, config: {keys_file: \"" + keys_file +
          "\"}}\n  - {name: limits, type: rate_limit, config: {rpm: 3}}\n"
          "  - {name: echo, type: echo}\n",
      builtin_registry());
  ASSERT_TRUE(pipeline);
  Caller intern{"", "", {{"authorization", "Bearer " + small}}};
  Caller alice{"", "", {{"authorization", "Bearer " + plain}}};
  ASSERT_FALSE(ask(*pipeline, intern).error);
  ASSERT_FALSE(ask(*pipeline, intern).error);
  expect_rate_limited(ask(*pipeline, intern), "requests");
  // Two of acme's three went to the intern's key.
  Answer last = ask(*pipeline, alice);
  ASSERT_FALSE(last.error) << last.error->message;
  EXPECT_EQ(last.header("x-ratelimit-remaining-requests"), "0");
  expect_rate_limited(ask(*pipeline, alice), "requests");
}

TEST(RateLimit, EachClientAddressHasItsBucketUnderEveryKey) {
  std::string keys_file = temp_path("rate-limit-address-keys.yaml");
  security::KeyStore store;
  std::string big = store.add("acme", "backend", {}, {{"rpm", 1000000}});
  store.save(keys_file);
  auto pipeline = build_yaml(
      "version: 1\nstages:\n  - {name: auth, type: auth, config: {keys_file: \"" + keys_file +
          "\"}}\n  - {name: limits, type: rate_limit, config: {address_rpm: 2}}\n"
          "  - {name: echo, type: echo}\n",
      builtin_registry());
  ASSERT_TRUE(pipeline);
  HeaderFields credential = {{"authorization", "Bearer " + big}};
  Caller first{"", "", credential, "203.0.113.7"};
  Answer one = ask(*pipeline, first);
  ASSERT_FALSE(one.error) << one.error->message;
  EXPECT_EQ(one.header("x-ratelimit-limit-requests"), "2") << "the address is the tightest";
  EXPECT_EQ(one.header("x-ratelimit-remaining-requests"), "1");
  ASSERT_FALSE(ask(*pipeline, first).error);
  // The key's own million does not lift the floor.
  Answer refused = ask(*pipeline, first);
  expect_rate_limited(refused, "requests");
  ASSERT_TRUE(refused.error);
  EXPECT_NE(refused.error->message.find("from your address"), std::string::npos)
      << refused.error->message;
  EXPECT_EQ(refused.header("retry-after"), "30");
  // The same address written as IPv4-mapped IPv6 is the same client.
  expect_rate_limited(ask(*pipeline, {"", "", credential, "::ffff:203.0.113.7"}), "requests");
  // Another address has a bucket of its own.
  EXPECT_FALSE(ask(*pipeline, {"", "", credential, "203.0.113.8"}).error);
  // A request that did not come over the network has no address bucket.
  for (int i = 0; i < 4; ++i)
    EXPECT_FALSE(ask(*pipeline, {"", "", credential, ""}).error);
}

TEST(RateLimit, AnonymousClientsAreLimitedByAddressWithIpv6GroupedBy64) {
  auto pipeline = limited_echo("{address_rpm: 1}");
  ASSERT_TRUE(pipeline);
  ASSERT_FALSE(ask(*pipeline, {"", "", {}, "2001:db8:1:2::1"}).error);
  // Any address of the same /64 is the same client.
  Answer same = ask(*pipeline, {"", "", {}, "2001:db8:1:2:ffff:ffff:ffff:9"});
  expect_rate_limited(same, "requests");
  EXPECT_FALSE(ask(*pipeline, {"", "", {}, "2001:db8:1:3::1"}).error) << "another /64";
  ASSERT_FALSE(ask(*pipeline, {"", "", {}, "198.51.100.1"}).error);
  EXPECT_FALSE(ask(*pipeline, {"", "", {}, "198.51.100.2"}).error) << "IPv4 is per address";
}

TEST(RateLimit, AddressTokensAreReservedAndSettledLikeTheOthers) {
  auto pipeline = limited_echo("{model: llm, address_tpm: 1000, window_s: 3600}");
  ASSERT_TRUE(pipeline);
  Caller client{"", "", {}, "192.0.2.10"};
  std::optional<std::string> first_remaining;
  for (int i = 0; i < 4; ++i) {
    Answer answer = ask(*pipeline, client, /*max_tokens=*/300);
    ASSERT_FALSE(answer.error) << "request " << i << ": " << answer.error->message;
    EXPECT_EQ(answer.header("x-ratelimit-limit-tokens"), "1000");
    if (!first_remaining) first_remaining = answer.header("x-ratelimit-remaining-tokens");
    EXPECT_EQ(answer.header("x-ratelimit-remaining-tokens"), first_remaining) << i;
  }
  Answer too_big = ask(*pipeline, client, /*max_tokens=*/1000);
  expect_rate_limited(too_big, "tokens");
  ASSERT_TRUE(too_big.error);
  EXPECT_NE(too_big.error->message.find("lower max_tokens"), std::string::npos);
}

// rate_limit -> the model stages: a request's answer is really generated, so a cap a gate sets
// shows in the answer's length.
std::unique_ptr<Pipeline> limited_model(const std::string& limits_config) {
  return build_yaml(
      "version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() +
          "\"}\nstages:\n  - {name: limits, type: rate_limit, config: " + limits_config +
          "}\n"
          "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
          "  - {name: prefill, type: prefill, config: {model: llm}}\n"
          "  - {name: decode, type: decode, config: {model: llm}}\n"
          "  - {name: detokenize, type: detokenize, config: {model: llm}}\n",
      builtin_registry());
}

struct Generated {
  std::optional<RequestError> error;
  HeaderFields headers;
  std::optional<FinishReason> finish;
  Usage usage;

  std::optional<std::string> header(const std::string& name) const {
    for (const auto& [field, value] : headers) {
      if (field == name) return value;
    }
    return std::nullopt;
  }
};

// A greedy request without max_tokens that never stops by itself; returns once released.
Generated ask_without_max_tokens(Pipeline& pipeline, const std::string& tenant) {
  std::shared_ptr<CollectingSink> collected;
  auto request = user_request("hello there", collected);
  auto watcher = std::make_shared<ReleaseWatchingSink>(collected);
  request->sink = watcher;
  request->identity.tenant = tenant;
  request->identity.user = "someone";
  request->generation.temperature = 0;
  request->generation.ignore_eos = true;
  EXPECT_EQ(request->generation.max_tokens, 0) << "the default is 'not given'";
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(collected->wait());
  Generated generated{request->error(), request->response_headers(), request->finish_reason(),
                      request->usage};
  request.reset();
  EXPECT_TRUE(watcher->wait_released());
  return generated;
}

// Without max_tokens the answer may take the whole context (1024 here), more than the whole
// bucket: it used to be refused for ever ("lower max_tokens", which the client never sent). It
// now gets what the bucket holds, and ends with "length" there.
TEST(RateLimit, WithoutMaxTokensTheAnswerGetsWhatTheBucketHoldsAndEndsThere) {
  auto pipeline = limited_model("{model: llm, tpm: 300, window_s: 3600}");
  ASSERT_TRUE(pipeline);
  Generated answer = ask_without_max_tokens(*pipeline, "acme");
  ASSERT_FALSE(answer.error) << answer.error->message;
  EXPECT_EQ(answer.finish, FinishReason::length);
  EXPECT_GT(answer.usage.prompt_tokens, 0);
  EXPECT_EQ(answer.usage.prompt_tokens + answer.usage.completion_tokens, 300);
  EXPECT_EQ(answer.header("x-ratelimit-remaining-tokens"), "0");
}

// Once the bucket is empty, a request without max_tokens waits like any other: a 429 with
// Retry-After that says so, never one telling it to lower a max_tokens it did not send.
TEST(RateLimit, WithoutMaxTokensAnEmptyBucketMeansWaitNotLowerMaxTokens) {
  auto pipeline = limited_model("{model: llm, tpm: 300, window_s: 3600}");
  ASSERT_TRUE(pipeline);
  ASSERT_FALSE(ask_without_max_tokens(*pipeline, "acme").error);
  Generated refused = ask_without_max_tokens(*pipeline, "acme");
  ASSERT_TRUE(refused.error) << "the spent bucket let a request through";
  EXPECT_EQ(refused.error->status, 429);
  EXPECT_EQ(refused.error->code, "rate_limit_exceeded");
  EXPECT_EQ(refused.error->message.find("lower max_tokens"), std::string::npos)
      << refused.error->message;
  EXPECT_NE(refused.error->message.find("retry in"), std::string::npos) << refused.error->message;
  EXPECT_NE(refused.error->message.find("max_tokens"), std::string::npos) << refused.error->message;
  ASSERT_TRUE(refused.header("retry-after"));
  EXPECT_GE(std::stoi(*refused.header("retry-after")), 1);
  // Another tenant's bucket is whole.
  EXPECT_FALSE(ask_without_max_tokens(*pipeline, "globex").error);
}

// An upstream engine is a model for the gates too: they reserve what it bounds the answer to
// (its max_tokens_default here), not the whole context nor a fixed 4096.
TEST(RateLimit, AnUpstreamAsModelReservesWhatItBoundsTheAnswerTo) {
  auto pipeline = build_yaml(
      "version: 1\nresources:\n  remote: {type: upstream, endpoints: \"http://127.0.0.1:9\", "
      "model: m, health: {path: \"\"}, context_length: 131072, max_tokens_default: 100}\n"
      "stages:\n  - {name: limits, type: rate_limit, config: {model: remote, tpm: 10000, "
      "window_s: 3600}}\n  - {name: echo, type: echo}\n",
      builtin_registry());
  ASSERT_TRUE(pipeline);
  Answer answer = ask(*pipeline, {"acme", "alice", {}}, /*max_tokens=*/0);
  ASSERT_FALSE(answer.error) << answer.error->message;
  ASSERT_TRUE(answer.header("x-ratelimit-remaining-tokens"));
  int remaining = std::stoi(*answer.header("x-ratelimit-remaining-tokens"));
  // 100 for the answer and the prompt, counted without a tokenizer by its bytes (under 400).
  EXPECT_LT(remaining, 10000 - 100);
  EXPECT_GT(remaining, 10000 - 100 - 400);
}

// Two replicas sharing one Redis share each address's bucket.
TEST(RateLimit, AddressBucketsInRedisAreSharedByReplicas) {
  if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed";
  RedisServer redis;
  std::string yaml = "version: 1\nresources:\n  shared: {type: redis, url: \"" + redis.url() +
                     "\"}\nstages:\n  - {name: limits, type: rate_limit, config: {store: "
                     "shared, address_rpm: 3}}\n  - {name: echo, type: echo}\n";
  auto first = build_yaml(yaml, builtin_registry());
  auto second = build_yaml(yaml, builtin_registry());
  ASSERT_TRUE(first && second);
  Caller client{"", "", {}, "2001:db8:9::5"};
  ASSERT_FALSE(ask(*first, client).error);
  ASSERT_FALSE(ask(*second, client).error);
  ASSERT_FALSE(ask(*first, {"", "", {}, "2001:db8:9::6"}).error) << "the same /64";
  expect_rate_limited(ask(*second, client), "requests");
  EXPECT_FALSE(ask(*second, {"", "", {}, "2001:db8:a::5"}).error);
}
}  // namespace
// A request that can never fit the model is refused as such (400), before any bucket is asked:
// a 429 would have clients retry it for ever.
TEST(RateLimit, ARequestThatCanNeverFitTheModelIs400ContextLengthExceeded) {
  auto pipeline = limited_echo("{model: llm, rpm: 1000, tpm: 100000}");
  ASSERT_TRUE(pipeline);
  Answer answer = ask(*pipeline, {"acme", "alice", {}}, 2000);
  ASSERT_TRUE(answer.error);
  EXPECT_EQ(answer.error->status, 400);
  EXPECT_EQ(answer.error->code, "context_length_exceeded");
  EXPECT_NE(answer.error->message.find("context of 1024 tokens"), std::string::npos)
      << answer.error->message;
}

}  // namespace chatflow::testing
