// quota: a token allowance per tenant per period (day, month or total), kept in a ledger that
// every finished request appends its prompt and completion tokens to: a SQLite file
// (`database`, this process alone) or PostgreSQL (`ledger`, shared by every replica). A request
// first reserves its prompt (counted with the model's tokenizer when `model` is set, else its
// bytes, which no tokenizer exceeds) plus max_tokens, and settles to what it used when it is
// over; a tenant whose reservation would pass the allowance gets 429 insufficient_quota, so
// concurrent requests can never together spend more than it. A request without max_tokens
// reserves the answer's bound (the model's, or kMaxTokensWithoutContext without one), or what is
// left of the allowance when that is less, and its answer is capped at what was reserved
// (GenerationParams::answer_token_cap). The stage is also the server's usage report
// (GET /v1/usage) and `chatflow usage` reads the same ledger.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <boost/json.hpp>

#include "framework/api/capabilities.h"
#include "framework/api/registry.h"
#include "framework/limits/side_request_gate.h"
#include "framework/usage/postgres_usage_ledger.h"
#include "framework/usage/sqlite_usage_ledger.h"
#include "stages/postgres.h"

namespace chatflow {
namespace {

constexpr const char* kDefaultDatabase = "var/usage.db";

struct QuotaConfig {
  std::string database;
  std::string ledger;
  int64_t reservation_ttl_s = 600;
  std::string period = "month";
  int64_t default_tokens = 0;
  std::map<std::string, std::string> tenants;
  std::string model;
};

class QuotaStage final : public RequestStage,
                         public UsageReporter,
                         public StorageHealth,
                         public limits::SideRequestGate {
 public:
  QuotaStage(std::shared_ptr<usage::UsageLedger> ledger, int64_t default_tokens,
             std::map<std::string, int64_t> tenants, std::shared_ptr<const AnswerTokenBound> model)
      : ledger_(std::move(ledger)),
        default_tokens_(default_tokens),
        tenants_(std::move(tenants)),
        model_(std::move(model)) {}

  Route process(Request& request, StageIo&) override {
    const std::string& tenant = request.identity.tenant;
    GenerationParams& generation = request.generation;
    std::optional<int64_t> allowance = allowance_of(tenant);
    bool answer_given = generation.max_tokens > 0;
    int64_t prompt = allowance ? prompt_bound(request) : 0;
    int64_t answer = allowance ? answer_bound(generation, prompt) : 0;
    std::string hold = usage::new_hold_id();
    bool reserved = reserve(tenant, hold, prompt + answer, allowance);
    if (!reserved && !answer_given && allowance) {
      // Without max_tokens the answer takes what is left of the allowance: a second try for that.
      int64_t least = std::min(answer, kMinimumGrantedAnswerTokens);
      int64_t left = left_of(tenant, *allowance);
      if (left - prompt >= least) {
        answer = std::min(answer, left - prompt);
        reserved = reserve(tenant, hold, prompt + answer, allowance);
      } else {
        answer = least;
      }
    }
    if (!reserved) refuse(tenant, *allowance, prompt, answer, answer_given);
    // The model holds the answer to what was reserved for it.
    if (allowance && !answer_given)
      generation.answer_token_cap = capped_answer_tokens(generation, answer);
    settle_when_released(request, hold, prompt + answer, allowance);
    return Route::to(0);
  }

  // An embeddings or rerank call: its input's tokens are all it spends.
  void admit_side_request(Request& request) override {
    const std::string& tenant = request.identity.tenant;
    std::optional<int64_t> allowance = allowance_of(tenant);
    int64_t tokens = allowance ? request.usage.prompt_tokens : 0;
    std::string hold = usage::new_hold_id();
    if (!reserve(tenant, hold, tokens, allowance)) refuse(tenant, *allowance, tokens, 0, true);
    settle_when_released(request, hold, tokens, allowance);
  }

  StorageStatus storage_status() const override {
    return {"usage", ledger_->lost_rows(), ledger_->last_failure_time()};
  }

  // Records what the request used in the ledger once it is over, settling its reservation.
  void settle_when_released(Request& request, const std::string& hold, int64_t reservation,
                            std::optional<int64_t> allowance) {
    const std::string& tenant = request.identity.tenant;
    auto ledger = ledger_;
    // What the request holds grows when it spends aside (an agent's steps), so no number of
    // agents in flight can overshoot the allowance.
    auto held = std::make_shared<std::atomic<int64_t>>(reservation);
    if (allowance) {
      request.on_reserve([ledger, tenant, hold, allowance, held](int64_t tokens) {
        try {
          if (!ledger->reserve(tenant, hold, tokens, allowance)) return false;
        } catch (const std::runtime_error& error) {
          std::fprintf(stderr, "chatflow: quota: %s\n", error.what());
          return false;
        }
        *held += tokens;
        return true;
      });
    }
    request.on_release([ledger, hold, held](const Request& done) {
      usage::UsageRecord record;
      record.tenant = done.identity.tenant;
      record.user = done.identity.user;
      record.request_id = done.id;
      record.model = done.model;
      // Tokens the model spent aside for the request (an agent's steps) are the tenant's too.
      record.prompt_tokens = done.usage.prompt_tokens + done.aside_usage.prompt_tokens;
      record.completion_tokens = done.usage.completion_tokens + done.aside_usage.completion_tokens;
      record.status = done.error() ? done.error()->status : 200;
      ledger->settle(done.identity.tenant, hold, held->load(), std::move(record));
    });
  }

  std::string usage_json(const std::string& tenant) const override {
    namespace json = boost::json;
    json::array data;
    for (const auto& row : ledger_->report(tenant)) {
      std::optional<int64_t> allowance = allowance_of(row.tenant);
      int64_t total = row.prompt_tokens + row.completion_tokens;
      data.push_back(
          {{"tenant", row.tenant},
           {"requests", row.requests},
           {"prompt_tokens", row.prompt_tokens},
           {"completion_tokens", row.completion_tokens},
           {"total_tokens", total},
           {"quota_tokens", allowance ? json::value(*allowance) : json::value()},
           {"remaining_tokens",
            allowance ? json::value(std::max<int64_t>(0, *allowance - total)) : json::value()}});
    }
    return json::serialize(
        json::object{{"object", "list"},
                     {"period", std::string(usage::to_string(ledger_->period()))},
                     {"period_start", ledger_->period_start()},
                     {"data", data}});
  }

 private:
  // A ledger that cannot be asked (its server down) refuses: the quota is never passed unseen.
  bool reserve(const std::string& tenant, const std::string& hold, int64_t tokens,
               std::optional<int64_t> allowance) {
    try {
      return ledger_->reserve(tenant, hold, tokens, allowance);
    } catch (const std::runtime_error& error) {
      std::fprintf(stderr, "chatflow: quota: %s\n", error.what());
      throw RequestFailure(RequestError{503,
                                        "server_error",
                                        "the usage ledger cannot be reached to check your "
                                        "tenant's quota; try again later",
                                        "quota_unavailable",
                                        {}});
    }
  }

  // What is left of the allowance: neither used nor held by requests in flight.
  int64_t left_of(const std::string& tenant, int64_t allowance) const {
    try {
      return allowance - ledger_->used_tokens(tenant) - ledger_->reserved_tokens(tenant);
    } catch (const std::runtime_error& error) {
      std::fprintf(stderr, "chatflow: quota: %s\n", error.what());
      throw RequestFailure(RequestError{503,
                                        "server_error",
                                        "the usage ledger cannot be reached to check your "
                                        "tenant's quota; try again later",
                                        "quota_unavailable",
                                        {}});
    }
  }

  // `answer`: what was to be reserved for the answer (max_tokens when `answer_given`, else the
  // least an answer without it is granted).
  [[noreturn]] void refuse(const std::string& tenant, int64_t allowance, int64_t prompt,
                           int64_t answer, bool answer_given) const {
    int64_t used = ledger_->used_tokens(tenant);
    int64_t held = ledger_->reserved_tokens(tenant);
    std::string left = std::to_string(std::max<int64_t>(0, allowance - used - held));
    std::string needs =
        answer_given ? "this request may use " + std::to_string(prompt + answer)
                     : "a request without max_tokens needs its prompt (" + std::to_string(prompt) +
                           ") and at least " + std::to_string(answer) +
                           " for the answer (wait for requests in flight or the next period, or "
                           "send a max_tokens that fits)";
    throw RequestFailure(
        RequestError{429,
                     "insufficient_quota",
                     "your tenant's quota of " + std::to_string(allowance) + " tokens this " +
                         std::string(usage::to_string(ledger_->period())) + " has " + left +
                         " left, and " + needs + " (" + std::to_string(used) + " used, " +
                         std::to_string(held) + " held by requests in flight)",
                     "insufficient_quota",
                     {}});
  }

  // The answer's bound: the model's (max_tokens, or its bound without it), else max_tokens or
  // kMaxTokensWithoutContext; held to the cap an earlier gate set.
  int64_t answer_bound(const GenerationParams& generation, int64_t prompt) const {
    if (model_) return model_->answer_token_limit(generation, prompt);
    return capped_answer_tokens(
        generation, generation.max_tokens > 0 ? generation.max_tokens : kMaxTokensWithoutContext);
  }

  // No more prompt tokens than this can reach the model for the request as it stands: exactly
  // so with the model's tokenizer, else its bytes (every token stands for at least one byte).
  int64_t prompt_bound(const Request& request) const {
    if (!request.prompt_tokens.empty()) return static_cast<int64_t>(request.prompt_tokens.size());
    if (model_) return model_->prompt_token_count(request);
    int64_t bytes = static_cast<int64_t>(request.prompt.size());
    for (const auto& message : request.messages)
      bytes += static_cast<int64_t>(message.content.size()) + 8;  // the template's markers
    return bytes;
  }

  // A listed tenant's allowance (0 blocks it); else default_tokens, where 0 means unlimited.
  std::optional<int64_t> allowance_of(const std::string& tenant) const {
    auto found = tenants_.find(tenant);
    if (found != tenants_.end()) return found->second;
    if (default_tokens_ > 0) return default_tokens_;
    return std::nullopt;
  }

  std::shared_ptr<usage::UsageLedger> ledger_;
  int64_t default_tokens_;
  std::map<std::string, int64_t> tenants_;
  std::shared_ptr<const AnswerTokenBound> model_;
};

StageTypeInfo quota_stage_type() {
  StageTypeBuilder<QuotaConfig> type(
      "quota", StageKind::request,
      "Per-tenant token allowance per period from a SQLite or PostgreSQL ledger; 429 "
      "insufficient_quota.");
  type.port("out", PortKind::request, "requests of tenants within their quota");
  type.config().key("database", &QuotaConfig::database,
                    "the SQLite ledger file (var/usage.db when no ledger is set)");
  type.config()
      .key("ledger", &QuotaConfig::ledger,
           "a postgres resource to keep the ledger in, shared by replicas (instead of database)")
      .resource("postgres");
  type.config()
      .key("reservation_ttl_s", &QuotaConfig::reservation_ttl_s,
           "with ledger: seconds a request's hold counts if its replica dies before it settles")
      .range(1, 86400);
  type.config()
      .key("period", &QuotaConfig::period, "what an allowance is per")
      .choices({"day", "month", "total"});
  type.config()
      .key("default_tokens", &QuotaConfig::default_tokens,
           "tokens per period for tenants not listed; 0: unlimited")
      .at_least(0);
  type.config().key("tenants", &QuotaConfig::tenants,
                    "tokens per period by tenant, e.g. {acme: 1000000}; 0 blocks the tenant");
  type.config()
      .key("model", &QuotaConfig::model,
           "the model the requests go to (a gguf_model, or an upstream): counts the prompt and "
           "bounds an answer without max_tokens as it does, for reservations")
      .resource("gguf_model or upstream");
  type.create([](const QuotaConfig& config, StageContext& context) {
    std::map<std::string, int64_t> tenants;
    for (const auto& [tenant, text] : config.tenants) {
      try {
        size_t used = 0;
        long long value = std::stoll(text, &used);
        if (used != text.size() || value < 0) throw std::invalid_argument(text);
        tenants[tenant] = value;
      } catch (const std::exception&) {
        throw ConfigError("tenants." + tenant + " must be a whole number of tokens, got '" + text +
                          "'");
      }
    }
    usage::Period period = *usage::period_from_name(config.period);
    std::shared_ptr<usage::UsageLedger> ledger;
    if (!config.ledger.empty()) {
      if (!config.database.empty())
        throw ConfigError("set one of 'database' (SQLite) and 'ledger' (PostgreSQL), not both");
      usage::PostgresLedgerOptions options;
      options.period = period;
      options.reservation_ttl = std::chrono::seconds(config.reservation_ttl_s);
      auto database = context.resource<PostgresResource>(config.ledger);
      options.write_buffer_rows = database->write_buffer_rows();
      try {
        ledger = std::make_shared<usage::PostgresUsageLedger>(database->client(), options);
      } catch (const postgres::PostgresError& error) {
        throw ConfigError(error.what());
      }
    } else {
      std::string path = config.database.empty() ? kDefaultDatabase : config.database;
      std::filesystem::path file(path);
      if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
      ledger = usage::SqliteUsageLedger::open(path, period);
    }
    std::shared_ptr<const AnswerTokenBound> model;
    if (!config.model.empty()) model = context.resource<AnswerTokenBound>(config.model);
    return std::make_unique<QuotaStage>(std::move(ledger), config.default_tokens,
                                        std::move(tenants), std::move(model));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(quota_stage_type);

}  // namespace
}  // namespace chatflow
