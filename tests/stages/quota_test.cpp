// The quota stage with a real SQLite ledger in a temporary directory: usage already in the file
// (written through the ledger, as an earlier server run leaves it) decides who is refused, and
// an answered request (tiny made-up model) is written to the file when it is released.
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <mutex>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/api/capabilities.h"
#include "framework/usage/sqlite_usage_ledger.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

struct Answer {
  std::optional<RequestError> error;
  std::string text;
  Usage usage;
  std::optional<FinishReason> finish;
};

// Asks as `tenant` (greedy, `max_tokens` tokens whatever the model says; 0: not given) and waits
// until the request was released.
Answer ask(Pipeline& pipeline, const std::string& tenant, int64_t max_tokens = 4) {
  std::shared_ptr<CollectingSink> collected;
  auto request = user_request("hello there", collected);
  auto watcher = std::make_shared<ReleaseWatchingSink>(collected);
  request->sink = watcher;
  request->id = "quota-test";
  request->model = "test-model";
  request->identity.tenant = tenant;
  request->identity.user = "someone";
  request->generation.temperature = 0;
  request->generation.max_tokens = max_tokens;
  request->generation.ignore_eos = true;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(collected->wait());
  Answer answer{request->error(), collected->text(), request->usage, request->finish_reason()};
  request.reset();
  EXPECT_TRUE(watcher->wait_released());
  return answer;
}

// Rows as an earlier run of the server leaves them in the file.
void write_usage(const std::string& database, usage::Period period,
                 const std::vector<usage::UsageRecord>& rows) {
  auto ledger = usage::SqliteUsageLedger::open(database, period);
  for (const auto& row : rows)
    ledger->append(row);
  ledger->flush();
}

usage::UsageRecord row(const std::string& tenant, int64_t prompt, int64_t completion,
                       int64_t time = 0) {
  usage::UsageRecord record;
  record.tenant = tenant;
  record.user = "earlier";
  record.request_id = "earlier-request";
  record.model = "test-model";
  record.prompt_tokens = prompt;
  record.completion_tokens = completion;
  record.time = time;
  return record;
}

std::unique_ptr<Pipeline> quota_echo(const std::string& quota_config) {
  return build_yaml("version: 1\nstages:\n  - {name: quota, type: quota, config: " + quota_config +
                        "}\n  - {name: echo, type: echo}\n",
                    builtin_registry());
}

std::string model_path() {
  engine::ModelShape shape;
  shape.ffn = 96;
  shape.context = 256;
  shape.type = kernels::TensorType::q8_0;
  return temp_model(shape);
}

void expect_insufficient_quota(const Answer& answer) {
  ASSERT_TRUE(answer.error) << "the quota was not enforced";
  EXPECT_EQ(answer.error->status, 429);
  EXPECT_EQ(answer.error->type, "insufficient_quota");
  EXPECT_EQ(answer.error->code, "insufficient_quota");
  EXPECT_EQ(answer.text, "");
}

TEST(Quota, PastTheAllowanceIs429InsufficientQuota) {
  std::string database = fresh_path("quota-past.db");
  write_usage(database, usage::Period::month, {row("acme", 60, 40), row("globex", 500, 0)});
  auto pipeline =
      quota_echo("{database: \"" + database + "\", tenants: {acme: \"100\", globex: \"1000\"}}");
  ASSERT_TRUE(pipeline);
  Answer refused = ask(*pipeline, "acme");
  expect_insufficient_quota(refused);
  // The request reserves its prompt's bytes (11), the chat markers (8) and max_tokens (4).
  EXPECT_EQ(refused.error->message,
            "your tenant's quota of 100 tokens this month has 0 left, and this request may use "
            "23 (100 used, 0 held by requests in flight)");
  // Another tenant, within its own allowance, carries on.
  Answer other = ask(*pipeline, "globex");
  EXPECT_FALSE(other.error) << other.error->message;
  EXPECT_EQ(other.text, "hello there");
}

TEST(Quota, ARequestPassesOnlyWhenWhatItMayUseFitsWhatIsLeft) {
  std::string database = fresh_path("quota-under.db");
  // acme has 23 left, exactly what "hello there" with max_tokens 4 may use; globex has 22.
  write_usage(database, usage::Period::month,
              {row("acme", 60, 17), row("globex", 60, 18), row("initech", 1'000'000, 0)});
  auto pipeline = quota_echo("{database: \"" + database +
                             "\", tenants: {acme: \"100\", globex: \"100\", blocked: \"0\"}}");
  ASSERT_TRUE(pipeline);
  Answer acme = ask(*pipeline, "acme");
  EXPECT_FALSE(acme.error) << acme.error->message;
  EXPECT_EQ(acme.text, "hello there");
  expect_insufficient_quota(ask(*pipeline, "globex"));
  // default_tokens is 0: a tenant not listed has no allowance to run out of; a listed 0 blocks.
  EXPECT_FALSE(ask(*pipeline, "initech").error);
  expect_insufficient_quota(ask(*pipeline, "blocked"));
}

TEST(Quota, DefaultTokensApplyToTenantsNotListed) {
  std::string database = fresh_path("quota-default.db");
  write_usage(database, usage::Period::month, {row("initech", 30, 20), row("acme", 30, 20)});
  auto pipeline =
      quota_echo("{database: \"" + database + "\", default_tokens: 50, tenants: {acme: \"80\"}}");
  ASSERT_TRUE(pipeline);
  Answer refused = ask(*pipeline, "initech");
  expect_insufficient_quota(refused);
  EXPECT_NE(refused.error->message.find("quota of 50 tokens"), std::string::npos)
      << refused.error->message;
  EXPECT_FALSE(ask(*pipeline, "acme").error) << "a listed tenant's own allowance wins";
}

TEST(Quota, UsageBeforeThePeriodDoesNotCount) {
  int64_t two_days_ago = static_cast<int64_t>(std::time(nullptr)) - 2 * 86400;
  std::string by_day = fresh_path("quota-day.db");
  write_usage(by_day, usage::Period::day, {row("acme", 100, 0, two_days_ago)});
  auto daily = quota_echo("{database: \"" + by_day + "\", period: day, tenants: {acme: \"100\"}}");
  ASSERT_TRUE(daily);
  EXPECT_FALSE(ask(*daily, "acme").error) << "yesterday's usage counted against today";

  std::string in_total = fresh_path("quota-total.db");
  write_usage(in_total, usage::Period::total, {row("acme", 100, 0, two_days_ago)});
  auto total =
      quota_echo("{database: \"" + in_total + "\", period: total, tenants: {acme: \"100\"}}");
  ASSERT_TRUE(total);
  Answer refused = ask(*total, "acme");
  expect_insufficient_quota(refused);
  EXPECT_NE(refused.error->message.find("this total"), std::string::npos) << refused.error->message;
}

// quota -> the model stages; `counting` is the quota's model key ("": none).
std::unique_ptr<Pipeline> quota_model(const std::string& database, const std::string& tenants,
                                      const std::string& counting = "llm") {
  return build_yaml("version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() +
                        "\"}\nstages:\n"
                        "  - {name: quota, type: quota, config: {database: \"" +
                        database + "\"" + (counting.empty() ? "" : ", model: " + counting) +
                        ", tenants: " + tenants +
                        "}}\n"
                        "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
                        "  - {name: prefill, type: prefill, config: {model: llm}}\n"
                        "  - {name: decode, type: decode, config: {model: llm}}\n"
                        "  - {name: detokenize, type: detokenize, config: {model: llm}}\n"
                        "  - {name: emit, type: sse_emit}\n",
                    builtin_registry());
}

TEST(Quota, AnAnsweredRequestIsWrittenToTheLedgerAndCountsAtOnce) {
  std::string database = fresh_path("quota-answered.db");
  auto pipeline = quota_model(database, "{acme: \"1000\"}");
  ASSERT_TRUE(pipeline);
  Answer first = ask(*pipeline, "acme");
  ASSERT_FALSE(first.error) << first.error->message;
  ASSERT_GT(first.usage.prompt_tokens, 0);
  ASSERT_EQ(first.usage.completion_tokens, 4);
  const int64_t used = first.usage.prompt_tokens + 4;

  // The server's usage report reads the file, after the queued rows are written.
  auto* reporter = pipeline->find<UsageReporter>();
  ASSERT_NE(reporter, nullptr);
  boost::json::object report = boost::json::parse(reporter->usage_json("acme")).as_object();
  EXPECT_EQ(report.at("period").as_string(), "month");
  const boost::json::array& data = report.at("data").as_array();
  ASSERT_EQ(data.size(), 1u) << report;
  const boost::json::object& acme = data[0].as_object();
  EXPECT_EQ(acme.at("tenant").as_string(), "acme");
  EXPECT_EQ(acme.at("requests").as_int64(), 1);
  EXPECT_EQ(acme.at("prompt_tokens").as_int64(), first.usage.prompt_tokens);
  EXPECT_EQ(acme.at("completion_tokens").as_int64(), 4);
  EXPECT_EQ(acme.at("quota_tokens").as_int64(), 1000);
  EXPECT_EQ(acme.at("remaining_tokens").as_int64(), 1000 - used);
  pipeline.reset();

  // The row is in the file itself, for the next run of the server: with an allowance one token
  // short of two such requests, the second is refused.
  auto reopened = usage::SqliteUsageLedger::open(database, usage::Period::month);
  std::vector<usage::TenantUsage> stored = reopened->report("acme");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].requests, 1);
  EXPECT_EQ(stored[0].prompt_tokens + stored[0].completion_tokens, used);
  reopened.reset();
  auto again = quota_model(database, "{acme: \"" + std::to_string(2 * used - 1) + "\"}");
  ASSERT_TRUE(again);
  expect_insufficient_quota(ask(*again, "acme"));
}

// 32 requests at once against an allowance for five: each reserves what it may use before it
// runs, so together they never spend more than the allowance (check-then-record let all pass).
TEST(Quota, ConcurrentRequestsNeverSpendMoreThanTheAllowance) {
  std::string database = fresh_path("quota-concurrent.db");
  auto probe = quota_model(database, "{acme: \"1000000\"}");
  ASSERT_TRUE(probe);
  Answer sized = ask(*probe, "acme");
  ASSERT_FALSE(sized.error);
  const int64_t each = sized.usage.prompt_tokens + 4;
  probe.reset();
  std::string fresh = fresh_path("quota-concurrent-2.db");
  const int64_t allowance = 5 * each;
  auto pipeline = quota_model(fresh, "{acme: \"" + std::to_string(allowance) + "\"}");
  ASSERT_TRUE(pipeline);
  std::vector<std::shared_ptr<CollectingSink>> sinks(32);
  std::vector<std::shared_ptr<Request>> requests;
  for (auto& sink : sinks) {
    auto request = user_request("hello there", sink);
    request->model = "test-model";
    request->identity.tenant = "acme";
    request->generation.temperature = 0;
    request->generation.max_tokens = 4;
    request->generation.ignore_eos = true;
    ASSERT_EQ(pipeline->submit(request), Admission::accepted);
    requests.push_back(request);
  }
  int64_t spent = 0;
  int passed = 0;
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSERT_TRUE(sinks[i]->wait());
    if (requests[i]->error()) {
      EXPECT_EQ(requests[i]->error()->code, "insufficient_quota");
      continue;
    }
    ++passed;
    spent += requests[i]->usage.prompt_tokens + requests[i]->usage.completion_tokens;
  }
  requests.clear();
  pipeline.reset();  // drains: every request is released and settled
  EXPECT_LE(spent, allowance);
  EXPECT_GE(passed, 5) << "what was settled is free again";
  auto ledger = usage::SqliteUsageLedger::open(fresh, usage::Period::month);
  EXPECT_LE(ledger->used_tokens("acme"), allowance);
  EXPECT_EQ(ledger->reserved_tokens("acme"), 0);
}

// Without max_tokens the answer may fill the model's context (256 tokens), more than the whole
// allowance: it used to be refused. It now gets what is left of the allowance and ends with
// "length" there, the ledger holding exactly the allowance.
TEST(Quota, WithoutMaxTokensTheAnswerGetsWhatIsLeftOfTheAllowance) {
  std::string database = fresh_path("quota-no-max-tokens.db");
  write_usage(database, usage::Period::month, {row("acme", 30, 20)});
  auto pipeline = quota_model(database, "{acme: \"150\"}");
  ASSERT_TRUE(pipeline);
  Answer answer = ask(*pipeline, "acme", /*max_tokens=*/0);
  ASSERT_FALSE(answer.error) << answer.error->message;
  EXPECT_EQ(answer.finish, FinishReason::length);
  ASSERT_GT(answer.usage.prompt_tokens, 0);
  EXPECT_EQ(answer.usage.prompt_tokens + answer.usage.completion_tokens, 100);
  pipeline.reset();
  auto ledger = usage::SqliteUsageLedger::open(database, usage::Period::month);
  EXPECT_EQ(ledger->used_tokens("acme"), 150);
  EXPECT_EQ(ledger->reserved_tokens("acme"), 0);
}

// When what is left cannot hold the prompt and a few tokens of answer, the request is refused,
// telling the client what it needs: never to lower a max_tokens it did not send.
TEST(Quota, WithoutMaxTokensTooLittleLeftIsRefusedNamingWhatItNeeds) {
  std::string database = fresh_path("quota-no-max-tokens-left.db");
  write_usage(database, usage::Period::month, {row("acme", 90, 0)});
  auto pipeline = quota_model(database, "{acme: \"100\"}");
  ASSERT_TRUE(pipeline);
  Answer refused = ask(*pipeline, "acme", /*max_tokens=*/0);
  expect_insufficient_quota(refused);
  EXPECT_NE(refused.error->message.find("without max_tokens"), std::string::npos)
      << refused.error->message;
  EXPECT_NE(refused.error->message.find("has 10 left"), std::string::npos)
      << refused.error->message;
}

// A quota without a model reserves the prompt's bytes and at most 4096 for the answer: the
// engine is held to what was reserved (its own bound, the context, is more than the allowance).
TEST(Quota, WithoutAModelTheAnswerIsHeldToWhatTheQuotaReserved) {
  std::string database = fresh_path("quota-no-model.db");
  auto pipeline = quota_model(database, "{acme: \"200\"}", /*counting=*/"");
  ASSERT_TRUE(pipeline);
  Answer answer = ask(*pipeline, "acme", /*max_tokens=*/0);
  ASSERT_FALSE(answer.error) << answer.error->message;
  EXPECT_EQ(answer.finish, FinishReason::length);
  // The prompt was held as its bytes (11) and the chat markers (8): the rest went to the answer.
  EXPECT_EQ(answer.usage.completion_tokens, 200 - 19);
  pipeline.reset();
  auto ledger = usage::SqliteUsageLedger::open(database, usage::Period::month);
  EXPECT_LE(ledger->used_tokens("acme"), 200);
}

TEST(Quota, ARequestThatUsedNoTokensLeavesNoRow) {
  std::string database = fresh_path("quota-echo.db");
  // Room for one request's reservation at a time: each leaves nothing behind when settled.
  auto pipeline = quota_echo("{database: \"" + database + "\", tenants: {acme: \"23\"}}");
  ASSERT_TRUE(pipeline);
  for (int i = 0; i < 3; ++i)
    EXPECT_FALSE(ask(*pipeline, "acme").error) << "echo used no tokens, yet the quota ran out";
  boost::json::object report =
      boost::json::parse(pipeline->find<UsageReporter>()->usage_json("acme")).as_object();
  EXPECT_TRUE(report.at("data").as_array().empty()) << report;
}

}  // namespace
}  // namespace chatflow::testing
