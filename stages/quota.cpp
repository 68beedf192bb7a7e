// quota: a token allowance per tenant per period (day, month or total), kept in a SQLite ledger
// that every finished request appends its prompt and completion tokens to. A tenant past its
// allowance gets 429 insufficient_quota. The stage is also the server's usage report
// (GET /v1/usage) and `chatflow usage` reads the same file.
#include <filesystem>

#include <boost/json.hpp>

#include "framework/api/registry.h"
#include "framework/api/capabilities.h"
#include "framework/usage/usage_ledger.h"

namespace chatflow {
namespace {

struct QuotaConfig {
  std::string database = "var/usage.db";
  std::string period = "month";
  int64_t default_tokens = 0;
  std::map<std::string, std::string> tenants;
};

class QuotaStage final : public RequestStage, public UsageReporter {
 public:
  QuotaStage(std::shared_ptr<usage::UsageLedger> ledger, int64_t default_tokens,
             std::map<std::string, int64_t> tenants)
      : ledger_(std::move(ledger)), default_tokens_(default_tokens), tenants_(std::move(tenants)) {}

  Route process(Request& request, StageIo&) override {
    const std::string& tenant = request.identity.tenant;
    int64_t allowance = allowance_of(tenant);
    if (allowance > 0) {
      int64_t used = ledger_->used_tokens(tenant);
      if (used >= allowance) {
        throw RequestFailure(RequestError{429,
                                          "insufficient_quota",
                                          "your tenant has used its quota of " +
                                              std::to_string(allowance) + " tokens this " +
                                              std::string(usage::to_string(ledger_->period())) +
                                              " (" + std::to_string(used) + " used)",
                                          "insufficient_quota",
                                          {}});
      }
    }
    auto ledger = ledger_;
    request.on_release([ledger](const Request& done) {
      if (done.usage.prompt_tokens == 0 && done.usage.completion_tokens == 0) return;
      usage::UsageRecord record;
      record.tenant = done.identity.tenant;
      record.user = done.identity.user;
      record.request_id = done.id;
      record.model = done.model;
      record.prompt_tokens = done.usage.prompt_tokens;
      record.completion_tokens = done.usage.completion_tokens;
      record.status = done.error() ? done.error()->status : 200;
      ledger->append(std::move(record));
    });
    return Route::to(0);
  }

  std::string usage_json(const std::string& tenant) const override {
    namespace json = boost::json;
    json::array data;
    for (const auto& row : ledger_->report(tenant)) {
      int64_t allowance = allowance_of(row.tenant);
      int64_t total = row.prompt_tokens + row.completion_tokens;
      data.push_back(
          {{"tenant", row.tenant},
           {"requests", row.requests},
           {"prompt_tokens", row.prompt_tokens},
           {"completion_tokens", row.completion_tokens},
           {"total_tokens", total},
           {"quota_tokens", allowance > 0 ? json::value(allowance) : json::value()},
           {"remaining_tokens",
            allowance > 0 ? json::value(std::max<int64_t>(0, allowance - total)) : json::value()}});
    }
    return json::serialize(
        json::object{{"object", "list"},
                     {"period", std::string(usage::to_string(ledger_->period()))},
                     {"period_start", ledger_->period_start()},
                     {"data", data}});
  }

 private:
  int64_t allowance_of(const std::string& tenant) const {
    auto found = tenants_.find(tenant);
    return found == tenants_.end() ? default_tokens_ : found->second;
  }

  std::shared_ptr<usage::UsageLedger> ledger_;
  int64_t default_tokens_;
  std::map<std::string, int64_t> tenants_;
};

StageTypeInfo quota_stage_type() {
  StageTypeBuilder<QuotaConfig> type(
      "quota", StageKind::request,
      "Per-tenant token allowance per period from a SQLite ledger; 429 insufficient_quota.");
  type.port("out", PortKind::request, "requests of tenants within their quota");
  type.config().key("database", &QuotaConfig::database, "the SQLite ledger file");
  type.config()
      .key("period", &QuotaConfig::period, "what an allowance is per")
      .choices({"day", "month", "total"});
  type.config()
      .key("default_tokens", &QuotaConfig::default_tokens,
           "tokens per period for tenants not listed; 0: unlimited")
      .at_least(0);
  type.config().key("tenants", &QuotaConfig::tenants,
                    "tokens per period by tenant, e.g. {acme: 1000000}");
  type.create([](const QuotaConfig& config, StageContext&) {
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
    std::filesystem::path file(config.database);
    if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
    auto ledger =
        usage::UsageLedger::open(config.database, *usage::period_from_name(config.period));
    return std::make_unique<QuotaStage>(std::move(ledger), config.default_tokens,
                                        std::move(tenants));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(quota_stage_type);

}  // namespace
}  // namespace chatflow
