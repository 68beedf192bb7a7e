#include "framework/limits/redis_rate_limiter.h"

#include <cmath>
#include <string>

#include "framework/storage/redis_client.h"

namespace chatflow::limits {
namespace {

// What both scripts begin with: Redis's clock, and a bucket's level refilled up to now.
constexpr const char* kBucketPrelude = R"lua(
local function text(x) return string.format('%.17g', x) end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local window = tonumber(ARGV[1])
local function refilled(key, limit)
  local state = redis.call('HMGET', key, 'level', 'updated')
  if not state[1] then return limit end
  local elapsed = math.max(0, now - tonumber(state[2])) / 1000000
  return math.min(limit, tonumber(state[1]) + elapsed * limit / window)
end
)lua";

// KEYS: the buckets. ARGV: window in seconds, key lifetime in ms, then limit and amount per key.
// Each bucket is a hash {level, updated (µs of Redis's clock)}; a missing one is full. Returns
// {granted, never, retry_after_s, then remaining and seconds_to_full per key}; numbers that may
// have fractions travel as strings (RESP2 would cut a Lua number to an integer).
const redis::Script kReserve(std::string(kBucketPrelude) + R"lua(
local lifetime = ARGV[2]
local levels = {}
local granted, never, retry = 1, 0, 0
for i = 1, #KEYS do
  local limit, amount = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  local level = refilled(KEYS[i], limit)
  levels[i] = level
  if amount > limit then
    granted, never = 0, 1
  elseif level < amount then
    granted = 0
    retry = math.max(retry, (amount - level) * window / limit)
  end
end
local result = {granted, never, text(retry)}
for i = 1, #KEYS do
  local limit, amount = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  local level = levels[i]
  if granted == 1 then
    level = level - amount
    redis.call('HSET', KEYS[i], 'level', text(level), 'updated', text(now))
    redis.call('PEXPIRE', KEYS[i], lifetime)
  end
  result[#result + 1] = text(math.max(0, level))
  result[#result + 1] = text((limit - level) * window / limit)
end
return result
)lua");

// KEYS: the buckets. ARGV: window, key lifetime, then limit and amount per key: the amount goes
// back (never above the limit; a negative amount takes more).
const redis::Script kRefund(std::string(kBucketPrelude) + R"lua(
for i = 1, #KEYS do
  local limit, amount = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  local level = refilled(KEYS[i], limit)
  level = math.min(limit, level + amount)
  redis.call('HSET', KEYS[i], 'level', text(level), 'updated', text(now))
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return #KEYS
)lua");

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

double number_of(const redis::Reply& reply) {
  if (reply.kind == redis::Reply::Kind::integer) return static_cast<double>(reply.integer);
  return std::stod(reply.text);
}

}  // namespace

RedisRateLimiter::RedisRateLimiter(std::shared_ptr<redis::Client> client, std::string key_prefix,
                                   double window_s)
    : client_(std::move(client)), key_prefix_(std::move(key_prefix)), window_s_(window_s) {}

Reservation RedisRateLimiter::reserve(const std::vector<Claim>& claims) {
  // A bucket refilled for a whole window is full: its key is not needed after that.
  std::string lifetime_ms =
      std::to_string(static_cast<int64_t>(std::ceil(window_s_ * 1000)) + 1000);
  std::vector<std::string> keys;
  std::vector<std::string> args = {number_text(window_s_), lifetime_ms};
  std::vector<size_t> counted;  // the claims with a limit, in key order
  for (size_t i = 0; i < claims.size(); ++i) {
    if (claims[i].limit <= 0) continue;
    counted.push_back(i);
    keys.push_back(key_prefix_ + claims[i].bucket);
    args.push_back(number_text(claims[i].limit));
    args.push_back(number_text(claims[i].amount));
  }
  Reservation result;
  result.granted = true;
  result.states.resize(claims.size());
  for (size_t i = 0; i < claims.size(); ++i)
    result.states[i].limit = claims[i].limit;
  if (keys.empty()) return result;
  redis::Reply reply;
  try {
    reply = client_->run(kReserve, keys, args);
  } catch (const redis::Error& error) {
    throw LimiterUnavailable(error.what());
  }
  if (reply.kind != redis::Reply::Kind::array || reply.elements.size() != 3 + 2 * keys.size()) {
    throw LimiterUnavailable("redis " + client_->endpoint().name() +
                             ": the rate-limit script answered in an unexpected shape");
  }
  result.granted = reply.elements[0].integer == 1;
  result.never = reply.elements[1].integer == 1;
  result.retry_after_s = number_of(reply.elements[2]);
  for (size_t k = 0; k < counted.size(); ++k) {
    BucketState& state = result.states[counted[k]];
    state.remaining = number_of(reply.elements[3 + 2 * k]);
    state.seconds_to_full = number_of(reply.elements[4 + 2 * k]);
  }
  return result;
}

void RedisRateLimiter::refund(const std::string& bucket, double limit, double amount) {
  refund(std::vector<Claim>{{bucket, limit, amount}});
}

void RedisRateLimiter::refund(const std::vector<Claim>& claims) {
  std::string lifetime_ms =
      std::to_string(static_cast<int64_t>(std::ceil(window_s_ * 1000)) + 1000);
  std::vector<std::string> keys;
  std::vector<std::string> args = {number_text(window_s_), lifetime_ms};
  for (const Claim& claim : claims) {
    if (claim.limit <= 0 || claim.amount == 0) continue;
    keys.push_back(key_prefix_ + claim.bucket);
    args.push_back(number_text(claim.limit));
    args.push_back(number_text(claim.amount));
  }
  if (keys.empty()) return;
  try {
    client_->run(kRefund, keys, args);
  } catch (const redis::Error& error) {
    throw LimiterUnavailable(error.what());
  }
}

}  // namespace chatflow::limits
