// rate_limit: requests per minute and tokens per minute, per tenant, per user (or per key, for a
// key with limits of its own) and per client address, as token buckets. A request reserves one
// request and its prompt tokens (counted with the model's tokenizer) plus max_tokens; when it is
// over, what it did not use goes back. Over the limit: 429 rate_limit_exceeded with Retry-After.
// Every response carries OpenAI's x-ratelimit-* headers for the tightest bucket.
//
// A request without max_tokens may have an answer as long as the model allows (its
// AnswerTokenBound: the context left, or max_tokens_default); it reserves that, or what the
// buckets still hold when that is less, and the answer's cap (GenerationParams::answer_token_cap)
// is lowered to what was reserved, so the model ends the answer there with "length". Only when
// the buckets cannot hold its prompt and kMinimumGrantedAnswerTokens is it refused, and told to
// wait.
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
#include <limits>
#include <sstream>

#include "framework/api/capabilities.h"
#include "framework/api/registry.h"
#include "framework/limits/address_group.h"
#include "framework/limits/rate_limiter.h"
#include "framework/limits/redis_rate_limiter.h"
#include "framework/limits/side_request_gate.h"
#include "framework/storage/failure_log.h"
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

class RateLimitStage final : public RequestStage, public limits::SideRequestGate {
 public:
  RateLimitStage(const RateLimitConfig& config, std::shared_ptr<const AnswerTokenBound> model,
                 std::shared_ptr<limits::RateLimiter> limiter, const std::string& who)
      : config_(config),
        model_(std::move(model)),
        limiter_(std::move(limiter)),
        failures_(std::make_shared<storage::FailureLog>(who)) {
    for (const auto& [tenant, text] : config.tenants)
      tenants_[tenant] = parse_limits(text, {config.rpm, config.tpm}, tenant);
  }

  Route process(Request& request, StageIo&) override {
    GenerationParams& generation = request.generation;
    int64_t prompt_tokens = static_cast<int64_t>(request.prompt_tokens.size());
    if (prompt_tokens == 0 && model_) prompt_tokens = model_->prompt_token_count(request);
    bool answer_given = generation.max_tokens > 0;
    // Without max_tokens, as long as the model allows (without a model, what one with an unknown
    // context would: kMaxTokensWithoutContext).
    int64_t bound = model_
                        ? model_->answer_token_limit(generation, prompt_tokens)
                        : capped_answer_tokens(generation, answer_given ? generation.max_tokens
                                                                        : kMaxTokensWithoutContext);
    refuse_what_cannot_fit(prompt_tokens, bound, answer_given);
    int64_t answer = bound;
    std::vector<limits::Claim> claims =
        claims_of(request, static_cast<double>(prompt_tokens + answer));
    bool holds_tokens = holds_any(claims, {kTenantTokens, kCallerTokens, kAddressTokens});
    limits::Reservation reservation;
    try {
      reservation = limiter_->reserve(claims);
      // Without max_tokens the answer takes what the buckets hold: a second try for that.
      if (!reservation.granted && !answer_given && holds_tokens &&
          !short_of(claims, reservation, {kTenantRequests, kCallerRequests, kAddressRequests})) {
        answer = grantable(claims, reservation, prompt_tokens, bound);
        set_tokens(claims, static_cast<double>(prompt_tokens + answer));
        reservation = limiter_->reserve(claims);
      }
      failures_->succeeded();
    } catch (const limits::LimiterUnavailable& error) {
      return unavailable(request, error.what());
    }
    set_headers(request, claims, reservation);
    if (!reservation.granted)
      refuse(request, claims, reservation, prompt_tokens, answer, answer_given);
    // The model holds the answer to what was reserved for it.
    if (!answer_given && holds_tokens)
      generation.answer_token_cap = capped_answer_tokens(generation, answer);
    settle_when_released(request, claims, static_cast<double>(prompt_tokens + answer));
    return Route::to(0);
  }

  // An embeddings or rerank call: one request, and its input's tokens, with no answer after them.
  void admit_side_request(Request& request) override {
    int64_t tokens = request.usage.prompt_tokens;
    std::vector<limits::Claim> claims = claims_of(request, static_cast<double>(tokens));
    limits::Reservation reservation;
    try {
      reservation = limiter_->reserve(claims);
      failures_->succeeded();
    } catch (const limits::LimiterUnavailable& error) {
      unavailable(request, error.what());  // throws unless on_error is fail_open
      return;
    }
    set_headers(request, claims, reservation);
    if (!reservation.granted && reservation.never &&
        !short_of(claims, reservation, {kTenantRequests, kCallerRequests, kAddressRequests})) {
      throw RequestFailure(RequestError{429,
                                        "tokens",
                                        "the input is " + std::to_string(tokens) +
                                            " tokens, more than your whole tokens limit per " +
                                            window_text(config_.window_s) + "; send less",
                                        "rate_limit_exceeded",
                                        {}});
    }
    if (!reservation.granted) refuse(request, claims, reservation, tokens, 0, true);
    settle_when_released(request, claims, static_cast<double>(tokens));
  }

 private:
  // A request that can never fit the model is a 400, not a 429 a client would retry for ever.
  void refuse_what_cannot_fit(int64_t prompt_tokens, int64_t bound, bool answer_given) const {
    int64_t context = model_ ? model_->context_token_limit() : 0;
    if (context <= 0 || prompt_tokens + bound <= context) return;
    std::string what = answer_given
                           ? " and max_tokens is " + std::to_string(bound) + ": together more than"
                           : ", which leaves no room for an answer in";
    throw RequestFailure(RequestError{400, "invalid_request_error",
                                      "the prompt is " + std::to_string(prompt_tokens) + " tokens" +
                                          what + " the model's context of " +
                                          std::to_string(context) + " tokens",
                                      "context_length_exceeded", "messages"});
  }

  static bool holds_any(const std::vector<limits::Claim>& claims,
                        std::initializer_list<size_t> indices) {
    for (size_t i : indices)
      if (claims[i].limit > 0) return true;
    return false;
  }

  // Whether any of the buckets at `indices` had less than its claim.
  static bool short_of(const std::vector<limits::Claim>& claims,
                       const limits::Reservation& reservation,
                       std::initializer_list<size_t> indices) {
    for (size_t i : indices) {
      if (claims[i].limit > 0 && reservation.states[i].remaining < claims[i].amount) return true;
    }
    return false;
  }

  // What an answer without max_tokens can have of what every token bucket holds now: at most
  // its bound, and at least the least it is granted (a try for that is then refused, saying how
  // long to wait for it).
  static int64_t grantable(const std::vector<limits::Claim>& claims,
                           const limits::Reservation& reservation, int64_t prompt_tokens,
                           int64_t bound) {
    double held = std::numeric_limits<double>::infinity();
    for (size_t i : {kTenantTokens, kCallerTokens, kAddressTokens}) {
      if (claims[i].limit > 0) held = std::min(held, reservation.states[i].remaining);
    }
    int64_t least = std::min(bound, kMinimumGrantedAnswerTokens);
    double room = std::floor(held) - static_cast<double>(prompt_tokens);
    if (room <= static_cast<double>(least)) return least;
    return room >= static_cast<double>(bound) ? bound : static_cast<int64_t>(room);
  }

  static void set_tokens(std::vector<limits::Claim>& claims, double tokens) {
    for (size_t i : {kTenantTokens, kCallerTokens, kAddressTokens})
      claims[i].amount = tokens;
  }

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

  // `answer`: the tokens reserved for the answer, max_tokens when `answer_given`, else the
  // least an answer without it is granted when even that did not fit.
  [[noreturn]] void refuse(Request& request, const std::vector<limits::Claim>& claims,
                           const limits::Reservation& reservation, int64_t prompt_tokens,
                           int64_t answer, bool answer_given) const {
    auto exhausted = [&](size_t i) { return short_of(claims, reservation, {i}); };
    bool requests_bound =
        short_of(claims, reservation, {kTenantRequests, kCallerRequests, kAddressRequests});
    std::string kind = requests_bound ? "requests" : "tokens";
    bool address_bound = requests_bound ? exhausted(kAddressRequests) : exhausted(kAddressTokens);
    std::string scope = address_bound ? " from your address" : "";
    std::string window = window_text(config_.window_s);
    if (reservation.never) {
      std::string why =
          answer_given
              ? "the request needs " + std::to_string(prompt_tokens + answer) +
                    " tokens (prompt + max_tokens), more than your whole tokens limit per " +
                    window + "; lower max_tokens"
              : "the prompt is " + std::to_string(prompt_tokens) + " tokens: with the least " +
                    "answer a request without max_tokens is given (" + std::to_string(answer) +
                    " tokens), more than your whole tokens limit per " + window +
                    "; shorten the prompt";
      throw RequestFailure(RequestError{429, kind, why, "rate_limit_exceeded", {}});
    }
    auto wait = static_cast<int64_t>(std::ceil(reservation.retry_after_s));
    request.set_response_header("retry-after", std::to_string(std::max<int64_t>(1, wait)));
    std::string message = "rate limit reached for " + kind + " per " + window + scope;
    if (!answer_given && !requests_bound) {
      message += ": a request without max_tokens needs its prompt (" +
                 std::to_string(prompt_tokens) + " tokens) and at least " + std::to_string(answer) +
                 " for the answer; retry in " + reset_text(reservation.retry_after_s) +
                 ", or send a max_tokens that fits";
    } else {
      message += "; retry in " + reset_text(reservation.retry_after_s);
    }
    throw RequestFailure(RequestError{429, kind, message, "rate_limit_exceeded", {}});
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
  std::shared_ptr<const AnswerTokenBound> model_;
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
           "the model the requests go to (a gguf_model, or an upstream): counts the prompt and "
           "bounds an answer without max_tokens as it does (needed for tpm)")
      .resource("gguf_model or upstream");
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
    std::shared_ptr<const AnswerTokenBound> model;
    if (!config.model.empty()) model = context.resource<AnswerTokenBound>(config.model);
    bool counts_tokens = config.tpm > 0 || config.user_tpm > 0 || config.address_tpm > 0;
    for (const auto& [tenant, text] : config.tenants)
      counts_tokens |= text.find("tpm") != std::string::npos;
    if (counts_tokens && !model) {
      throw ConfigError(
          "token limits need 'model' (a gguf_model or an upstream) to count prompt tokens");
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
