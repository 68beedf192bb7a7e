// rate_limit: requests per minute and tokens per minute, per tenant, per user (or per key, for a
// key with limits of its own) and per client address, as token buckets. A request reserves one
// request and its prompt tokens (counted exactly with the model's tokenizer) plus max_tokens;
// when it is over, what it did not use goes back. Over the limit: 429 rate_limit_exceeded with
// Retry-After. Every response carries OpenAI's x-ratelimit-* headers for the tightest bucket.
//
// The address is the client's as the server resolved it (behind server.trusted_proxies, the
// forwarded one), an IPv6 client grouped by its /64: a limit on anonymous traffic, and a floor
// under keyed traffic that no key's own limit lifts.
//
// With `store: <redis resource>` the buckets are shared by every replica naming the same Redis
// (one atomic Lua script per reservation); while Redis cannot be reached, `on_error` decides:
// fail_closed answers 503 rate_limiter_unavailable, fail_open lets requests pass uncounted. Both
// are counted (chatflow:request_annotations_total{name="rate_limit"}) and logged at most every
// 10 s; the next request after Redis returns is limited again.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "framework/limits/address_group.h"
#include "framework/limits/rate_limiter.h"
#include "framework/limits/redis_rate_limiter.h"
#include "framework/storage/failure_log.h"
#include "stages/gguf_model.h"
#include "stages/redis.h"

namespace chatflow {
namespace {

struct RateLimitConfig {
  std::string model;
  double rpm = 0;
  double tpm = 0;
  double user_rpm = 0;
  double user_tpm = 0;
  double address_rpm = 0;
  double address_tpm = 0;
  int address_ipv6_prefix = 64;
  double window_s = 60;
  std::map<std::string, std::string> tenants;
  std::string store;
  std::string on_error = "fail_closed";
};

struct Limits {
  double rpm = 0;
  double tpm = 0;
};

// "rpm=60 tpm=10000" (spaces or commas between).
Limits parse_limits(const std::string& text, Limits defaults, const std::string& tenant) {
  std::string normalized = text;
  for (char& c : normalized)
    c = c == ',' ? ' ' : c;
  std::istringstream words(normalized);
  std::string word;
  while (words >> word) {
    size_t equals = word.find('=');
    std::string name = word.substr(0, equals);
    double value = -1;
    try {
      if (equals != std::string::npos) value = std::stod(word.substr(equals + 1));
    } catch (const std::exception&) {
    }
    if (value < 0 || (name != "rpm" && name != "tpm")) {
      throw ConfigError("tenants." + tenant + ": expected 'rpm=N tpm=N', got '" + text + "'");
    }
    (name == "rpm" ? defaults.rpm : defaults.tpm) = value;
  }
  return defaults;
}

// OpenAI's reset format: "20ms", "1s", "6m0s".
std::string window_text(double window_s) {
  if (window_s == 60) return "minute";
  char text[32];
  std::snprintf(text, sizeof text, "%g s", window_s);
  return text;
}

std::string reset_text(double seconds) {
  if (seconds < 1) return std::to_string(static_cast<int>(std::ceil(seconds * 1000))) + "ms";
  auto whole = static_cast<int64_t>(std::ceil(seconds));
  if (whole < 60) return std::to_string(whole) + "s";
  return std::to_string(whole / 60) + "m" + std::to_string(whole % 60) + "s";
}

// The buckets one request takes from, in this order; a bucket whose limit is 0 is not counted.
enum ClaimIndex : size_t {
  kTenantRequests,
  kTenantTokens,
  kCallerRequests,
  kCallerTokens,
  kAddressRequests,
  kAddressTokens,
  kClaimCount
};

class RateLimitStage final : public RequestStage {
 public:
  RateLimitStage(const RateLimitConfig& config, std::shared_ptr<GgufModel> model,
                 std::shared_ptr<limits::RateLimiter> limiter, const std::string& who)
      : config_(config),
        model_(std::move(model)),
        limiter_(std::move(limiter)),
        failures_(std::make_shared<storage::FailureLog>(who)) {
    for (const auto& [tenant, text] : config.tenants)
      tenants_[tenant] = parse_limits(text, {config.rpm, config.tpm}, tenant);
  }

  Route process(Request& request, StageIo&) override {
    int64_t prompt_tokens = static_cast<int64_t>(request.prompt_tokens.size());
    if (prompt_tokens == 0 && model_)
      prompt_tokens = static_cast<int64_t>(model_->encode_prompt(request, true).size());
    // Without max_tokens, up to the model's context (GgufModel::answer_token_limit).
    int64_t max_tokens = answer_token_bound(model_.get(), request.generation, prompt_tokens);
    // A request that can never fit the model is a 400, not a 429 a client would retry for ever.
    if (model_ && prompt_tokens + max_tokens > model_->context_length()) {
      throw RequestFailure(RequestError{
          400, "invalid_request_error",
          "the prompt is " + std::to_string(prompt_tokens) + " tokens and max_tokens is " +
              std::to_string(max_tokens) + ": together more than the model's " + "context of " +
              std::to_string(model_->context_length()) + " tokens",
          "context_length_exceeded", "messages"});
    }
    double tokens = static_cast<double>(prompt_tokens + max_tokens);
    std::vector<limits::Claim> claims = claims_of(request, tokens);
    limits::Reservation reservation;
    try {
      reservation = limiter_->reserve(claims);
      failures_->succeeded();
    } catch (const limits::LimiterUnavailable& error) {
      return unavailable(request, error.what());
    }
    set_headers(request, claims, reservation);
    if (!reservation.granted) refuse(request, claims, reservation, tokens);
    settle_when_released(request, claims, tokens);
    return Route::to(0);
  }

 private:
  // The tenant's, the caller's and the client address's buckets. The caller is the user, or the
  // key when it brings a limit of its own (`keys add --rpm`): that limit replaces user_rpm for
  // the key's requests, and when it is above the tenant's limit the tenant's bucket no longer
  // counts them, so the key really gets what it was given. At or below the tenant's limit the
  // key stays inside the tenant's bucket, which all its keys share.
  std::vector<limits::Claim> claims_of(const Request& request, double tokens) const {
    const Identity& identity = request.identity;
    Limits tenant{config_.rpm, config_.tpm};
    if (auto found = tenants_.find(identity.tenant); found != tenants_.end())
      tenant = found->second;
    std::string tenant_key = "tenant:" + identity.tenant;
    std::string user_key = "user:" + identity.tenant + "/" + identity.user;
    std::string key_key = "key:" + identity.tenant + "/" + identity.key_id;
    std::vector<limits::Claim> claims(kClaimCount);
    auto caller = [&](const char* name, double user_default, double& tenant_limit,
                      const std::string& kind, double amount, limits::Claim& claim) {
      auto own = identity.limits.find(name);
      if (own == identity.limits.end()) {
        claim = {user_key + kind, user_default, amount};
        return;
      }
      claim = {(identity.key_id.empty() ? user_key : key_key) + kind, own->second, amount};
      if (tenant_limit > 0 && own->second > tenant_limit) tenant_limit = 0;
    };
    caller("rpm", config_.user_rpm, tenant.rpm, ":requests", 1, claims[kCallerRequests]);
    caller("tpm", config_.user_tpm, tenant.tpm, ":tokens", tokens, claims[kCallerTokens]);
    claims[kTenantRequests] = {tenant_key + ":requests", tenant.rpm, 1};
    claims[kTenantTokens] = {tenant_key + ":tokens", tenant.tpm, tokens};
    // Every request with an address takes from its address's buckets: a floor under keyed
    // callers, and the only limit a pipeline without auth has per client.
    std::string address =
        limits::address_group(request.client_address, config_.address_ipv6_prefix);
    bool by_address = !address.empty();
    claims[kAddressRequests] = {"address:" + address + ":requests",
                                by_address ? config_.address_rpm : 0, 1};
    claims[kAddressTokens] = {"address:" + address + ":tokens",
                              by_address ? config_.address_tpm : 0, tokens};
    return claims;
  }

  [[noreturn]] void refuse(Request& request, const std::vector<limits::Claim>& claims,
                           const limits::Reservation& reservation, double tokens) const {
    auto exhausted = [&](size_t i) {
      return claims[i].limit > 0 && reservation.states[i].remaining < claims[i].amount;
    };
    bool requests_bound =
        exhausted(kTenantRequests) || exhausted(kCallerRequests) || exhausted(kAddressRequests);
    std::string kind = requests_bound ? "requests" : "tokens";
    bool address_bound = requests_bound ? exhausted(kAddressRequests) : exhausted(kAddressTokens);
    std::string scope = address_bound ? " from your address" : "";
    if (reservation.never) {
      throw RequestFailure(
          RequestError{429,
                       kind,
                       "the request needs " + std::to_string(static_cast<int64_t>(tokens)) +
                           " tokens (prompt + max_tokens), more than your whole tokens limit per " +
                           window_text(config_.window_s) + "; lower max_tokens",
                       "rate_limit_exceeded",
                       {}});
    }
    auto wait = static_cast<int64_t>(std::ceil(reservation.retry_after_s));
    request.set_response_header("retry-after", std::to_string(std::max<int64_t>(1, wait)));
    throw RequestFailure(RequestError{429,
                                      kind,
                                      "rate limit reached for " + kind + " per " +
                                          window_text(config_.window_s) + scope + "; retry in " +
                                          reset_text(reservation.retry_after_s),
                                      "rate_limit_exceeded",
                                      {}});
  }

  // Settle when the request is over: give back the tokens reserved and not used (or take the
  // difference when the prompt grew after this stage).
  void settle_when_released(Request& request, const std::vector<limits::Claim>& claims,
                            double tokens) {
    auto limiter = limiter_;
    auto failures = failures_;
    bool fail_open = config_.on_error == "fail_open";
    std::vector<limits::Claim> token_claims = {claims[kTenantTokens], claims[kCallerTokens],
                                               claims[kAddressTokens]};
    // Spending aside for the request (an agent's steps) takes from the same buckets first.
    auto reserved = std::make_shared<std::atomic<int64_t>>(static_cast<int64_t>(tokens));
    request.on_reserve([limiter, failures, fail_open, token_claims, reserved](int64_t extra) {
      std::vector<limits::Claim> more = token_claims;
      for (auto& claim : more)
        claim.amount = static_cast<double>(extra);
      try {
        if (!limiter->reserve(more).granted) return false;
      } catch (const limits::LimiterUnavailable& error) {
        failures->failed(error.what(), fail_open ? "an agent step passes unlimited (fail_open)"
                                                 : "an agent step is refused (fail_closed)");
        return fail_open;
      }
      *reserved += extra;
      return true;
    });
    request.on_release([limiter, failures, reserved, token_claims](const Request& done) {
      double used = static_cast<double>(done.usage.prompt_tokens + done.usage.completion_tokens);
      if (done.usage.prompt_tokens == 0) used = 0;  // never reached the model
      // What the model spent aside for it (an agent's steps) is the caller's too.
      used += static_cast<double>(done.aside_usage.total());
      std::vector<limits::Claim> unused = token_claims;
      for (auto& claim : unused)
        claim.amount = static_cast<double>(reserved->load()) - used;
      try {
        limiter->refund(unused);
      } catch (const limits::LimiterUnavailable& error) {
        failures->failed(error.what(), "a request's unused tokens were not given back");
      }
    });
  }

  // The store failed: pass the request uncounted or refuse it, as on_error says.
  Route unavailable(Request& request, const std::string& error) {
    if (config_.on_error == "fail_open") {
      request.annotate("rate_limit", "fail_open");
      failures_->failed(error, "requests pass unlimited (on_error: fail_open)");
      return Route::to(0);
    }
    request.annotate("rate_limit", "fail_closed");
    failures_->failed(error, "requests are refused with 503 (on_error: fail_closed)");
    throw RequestFailure(RequestError{503,
                                      "server_error",
                                      "the rate limiter is unavailable, so the request was not "
                                      "admitted; retry shortly",
                                      "rate_limiter_unavailable",
                                      {}});
  }

  static void set_headers(Request& request, const std::vector<limits::Claim>& claims,
                          const limits::Reservation& reservation) {
    // The tightest bucket of each kind.
    auto tightest = [&](std::initializer_list<size_t> indices) -> const limits::BucketState* {
      const limits::BucketState* best = nullptr;
      for (size_t i : indices) {
        if (claims[i].limit <= 0) continue;
        if (!best || reservation.states[i].remaining < best->remaining)
          best = &reservation.states[i];
      }
      return best;
    };
    auto put = [&](const char* kind, const limits::BucketState* state) {
      if (!state) return;
      std::string suffix = kind;
      request.set_response_header("x-ratelimit-limit-" + suffix,
                                  std::to_string(static_cast<int64_t>(state->limit)));
      request.set_response_header(
          "x-ratelimit-remaining-" + suffix,
          std::to_string(static_cast<int64_t>(std::floor(state->remaining))));
      request.set_response_header("x-ratelimit-reset-" + suffix,
                                  reset_text(state->seconds_to_full));
    };
    put("requests", tightest({kTenantRequests, kCallerRequests, kAddressRequests}));
    put("tokens", tightest({kTenantTokens, kCallerTokens, kAddressTokens}));
  }

  RateLimitConfig config_;
  std::shared_ptr<GgufModel> model_;
  std::shared_ptr<limits::RateLimiter> limiter_;
  std::shared_ptr<storage::FailureLog> failures_;
  std::map<std::string, Limits> tenants_;
};

StageTypeInfo rate_limit_stage_type() {
  StageTypeBuilder<RateLimitConfig> type(
      "rate_limit", StageKind::request,
      "Token buckets per tenant, user (or key) and client address for requests and tokens "
      "per minute; 429 with Retry-After and x-ratelimit-* headers.");
  type.port("out", PortKind::request, "requests within their limits");
  type.config()
      .key("model", &RateLimitConfig::model,
           "a gguf_model resource, to count prompt tokens exactly (needed for tpm)")
      .resource("gguf_model");
  type.config()
      .key("rpm", &RateLimitConfig::rpm, "requests per window per tenant; 0: no limit")
      .at_least(0);
  type.config()
      .key("tpm", &RateLimitConfig::tpm,
           "tokens (prompt + max_tokens) per window per tenant; 0: no limit")
      .at_least(0);
  type.config()
      .key("user_rpm", &RateLimitConfig::user_rpm,
           "requests per window per user (a key's own rpm replaces it, and lifts the tenant's "
           "rpm for that key when above it)")
      .at_least(0);
  type.config()
      .key("user_tpm", &RateLimitConfig::user_tpm,
           "tokens per window per user (a key's own tpm replaces it, and lifts the tenant's tpm "
           "for that key when above it)")
      .at_least(0);
  type.config()
      .key("address_rpm", &RateLimitConfig::address_rpm,
           "requests per window per client address (behind server.trusted_proxies: the "
           "forwarded client), for every request, keyed or not; 0: no limit")
      .at_least(0);
  type.config()
      .key("address_tpm", &RateLimitConfig::address_tpm,
           "tokens per window per client address; 0: no limit")
      .at_least(0);
  type.config()
      .key("address_ipv6_prefix", &RateLimitConfig::address_ipv6_prefix,
           "an IPv6 client is its address's first this many bits (a host usually has a /64)")
      .range(16, 128);
  type.config()
      .key("window_s", &RateLimitConfig::window_s, "the window the limits are per, in seconds")
      .range(0.001, 86400);
  type.config().key("tenants", &RateLimitConfig::tenants,
                    "per-tenant limits, e.g. {acme: \"rpm=60 tpm=10000\"}");
  type.config()
      .key("store", &RateLimitConfig::store,
           "a redis resource: buckets shared by every replica using it; empty: this process's "
           "memory")
      .resource("redis");
  type.config()
      .key("on_error", &RateLimitConfig::on_error,
           "with a store that cannot be reached: fail_closed (503 rate_limiter_unavailable; "
           "refuses to start without it) or fail_open (requests pass uncounted)")
      .choices({"fail_closed", "fail_open"});
  type.create([](const RateLimitConfig& config, StageContext& context) {
    std::shared_ptr<GgufModel> model;
    if (!config.model.empty()) model = context.resource<GgufModel>(config.model);
    bool counts_tokens = config.tpm > 0 || config.user_tpm > 0 || config.address_tpm > 0;
    for (const auto& [tenant, text] : config.tenants)
      counts_tokens |= text.find("tpm") != std::string::npos;
    if (counts_tokens && !model) {
      throw ConfigError("token limits need 'model' (a gguf_model) to count prompt tokens");
    }
    std::shared_ptr<limits::RateLimiter> limiter;
    std::string who = "rate_limit '" + context.stage_name() + "'";
    if (config.store.empty()) {
      limiter = std::make_shared<limits::InMemoryRateLimiter>(config.window_s);
    } else {
      auto store = context.resource<RedisResource>(config.store);
      who += " (" + store->description() + ")";
      std::string error;
      // A replica that must share its limits does not quietly start alone.
      if (!store->client()->ping(&error)) {
        if (config.on_error == "fail_closed") {
          throw ConfigError(store->description() + " is unreachable (" + error +
                            "); with on_error: fail_closed the limits do not start without it "
                            "(fail_open would start and let requests pass until it answers)");
        }
        std::fprintf(stderr,
                     "chatflow: %s: starting without its store (%s); requests pass "
                     "unlimited until it answers (on_error: fail_open)\n",
                     who.c_str(), error.c_str());
      }
      limiter = std::make_shared<limits::RedisRateLimiter>(
          store->client(), store->key_prefix() + "ratelimit:" + context.stage_name() + ":",
          config.window_s);
    }
    return std::make_unique<RateLimitStage>(config, std::move(model), std::move(limiter), who);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(rate_limit_stage_type);

}  // namespace
}  // namespace chatflow
