#include "framework/history/redis_turn_cache.h"

#include <ctime>

#include <boost/json.hpp>

#include "framework/security/crypto.h"
#include "framework/storage/failure_log.h"
#include "framework/storage/redis_client.h"

namespace chatflow::history {
namespace json = boost::json;
namespace {

// A session's list starts with this header, so a session known to have no turns yet is cached
// too (its first turn then reaches the other replicas through Redis).
constexpr std::string_view kHeader = "chatflow-turns-1";

// KEYS: the turns, the version. ARGV: the turn, the lifetime in ms, how many turns it was placed
// among (Turn::placed_among; -1: not placed). Bumps the version; appends only to a list that
// exists (a missing one is filled whole from the durable store later) and holds as many turns as
// the turn was placed among: otherwise another replica appended meanwhile, the durable store
// moved the turn's distances back, and the list goes, to be filled again with them.
const redis::Script kAppend(R"lua(
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  if ARGV[3] ~= '-1' and redis.call('LLEN', KEYS[1]) - 1 ~= tonumber(ARGV[3]) then
    redis.call('DEL', KEYS[1])
    return 0
  end
  redis.call('RPUSH', KEYS[1], ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
)lua");

// KEYS: the turns, the version. ARGV: the version seen before the durable read ('' for none),
// the lifetime, then the turns. Writes only if nothing was appended meanwhile.
const redis::Script kFill(R"lua(
local version = redis.call('GET', KEYS[2]) or ''
if version ~= ARGV[1] or redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 3, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
)lua");

}  // namespace

std::string turn_json(const Turn& turn) {
  return json::serialize(json::object{{"user", turn.user},
                                      {"assistant", turn.assistant},
                                      {"status", std::string(to_string(turn.status))},
                                      {"prompt_tokens", turn.prompt_tokens},
                                      {"completion_tokens", turn.completion_tokens},
                                      {"time", turn.time},
                                      {"parent_back", turn.parent_back},
                                      {"question_back", turn.question_back},
                                      {"active_back", turn.active_back}});
}

Turn turn_of(const std::string& text) {
  json::error_code error;
  json::value parsed = json::parse(text, error);
  if (error || !parsed.is_object()) throw std::runtime_error("a cached turn is not a JSON object");
  try {
    const json::object& object = parsed.as_object();
    Turn turn;
    turn.user = object.at("user").as_string();
    turn.assistant = object.at("assistant").as_string();
    std::string_view status = object.at("status").as_string();
    turn.status = status == "completed"   ? TurnStatus::completed
                  : status == "cancelled" ? TurnStatus::cancelled
                  : status == "filtered"  ? TurnStatus::filtered
                                          : TurnStatus::failed;
    turn.prompt_tokens = object.at("prompt_tokens").as_int64();
    turn.completion_tokens = object.at("completion_tokens").as_int64();
    turn.time = object.at("time").as_int64();
    // Turns cached before branches: a chain (the defaults).
    if (const json::value* back = object.if_contains("parent_back"))
      turn.parent_back = back->as_int64();
    if (const json::value* back = object.if_contains("question_back"))
      turn.question_back = back->as_int64();
    if (const json::value* back = object.if_contains("active_back"))
      turn.active_back = back->as_int64();
    return turn;
  } catch (const std::exception& failure) {
    throw std::runtime_error(std::string("a cached turn has the wrong shape: ") + failure.what());
  }
}

RedisTurnCache::RedisTurnCache(std::unique_ptr<HistoryStore> durable,
                               std::shared_ptr<redis::Client> client, std::string key_prefix,
                               std::chrono::milliseconds ttl,
                               std::shared_ptr<storage::FailureLog> failures, Retention retention)
    : durable_(std::move(durable)),
      client_(std::move(client)),
      key_prefix_(std::move(key_prefix)),
      ttl_(ttl),
      failures_(std::move(failures)),
      retention_(retention) {
  // Evicted on whichever thread wrote: marked here, gone from Redis before this replica's next
  // use of it (an append right after its own eviction drops them at once).
  durable_->on_evicted([this](const std::vector<SessionKey>& keys) {
    for (const auto& key : keys)
      mark_stale(key);
    evicted(keys);
  });
}

RedisTurnCache::~RedisTurnCache() {
  // The durable store's writer may still evict while it stops: its listener needs the rest.
  durable_.reset();
}

std::string RedisTurnCache::key_of(const SessionKey& key) const {
  return key_prefix_ +
         security::sha256_hex(json::serialize(json::array{key.tenant, key.owner, key.session}));
}

void RedisTurnCache::mark_stale(const SessionKey& key) {
  std::lock_guard lock(stale_mutex_);
  stale_.insert(key);
}

void RedisTurnCache::drop_stale() {
  std::set<SessionKey> stale;
  {
    std::lock_guard lock(stale_mutex_);
    if (stale_.empty()) return;
    stale.swap(stale_);
  }
  std::vector<redis::Command> commands;
  for (const auto& key : stale) {
    commands.push_back({"DEL", key_of(key) + ":turns"});
    commands.push_back({"INCR", key_of(key) + ":version"});
  }
  try {
    client_->pipeline(commands);
  } catch (const redis::Error&) {
    std::lock_guard lock(stale_mutex_);
    stale_.insert(stale.begin(), stale.end());
    throw;
  }
}

std::vector<Turn> RedisTurnCache::load(const SessionKey& key) {
  return load_recent(key, 0);
}

std::vector<Turn> RedisTurnCache::unexpired(std::vector<Turn> turns) const {
  int64_t cutoff = retention_.expired_before(static_cast<int64_t>(std::time(nullptr)));
  std::erase_if(turns, [&](const Turn& turn) { return turn.time < cutoff; });
  return turns;
}

std::vector<Turn> RedisTurnCache::load_recent(const SessionKey& key, size_t max_turns) {
  std::string base = key_of(key);
  std::string ttl = std::to_string(ttl_.count());
  // The whole list, or its last max_turns entries (the header among them when the session is
  // shorter).
  std::string first = max_turns == 0 ? "0" : "-" + std::to_string(max_turns);
  std::string version;
  try {
    drop_stale();
    std::vector<redis::Reply> replies = client_->pipeline({{"LRANGE", base + ":turns", first, "-1"},
                                                           {"GET", base + ":version"},
                                                           {"PEXPIRE", base + ":turns", ttl}});
    for (const auto& reply : replies)
      redis::expect_ok(reply, *client_, "reading session turns");
    failures_->succeeded();
    const auto& cached = replies[0].elements;
    if (!cached.empty()) {
      std::vector<Turn> turns;
      try {
        bool has_header = cached[0].text == kHeader;
        if (max_turns == 0 && !has_header)
          throw std::runtime_error("a cached session has no header");
        for (size_t i = has_header ? 1 : 0; i < cached.size(); ++i)
          turns.push_back(turn_of(cached[i].text));
        return unexpired(std::move(turns));
      } catch (const std::runtime_error& damaged) {
        failures_->failed(damaged.what(), "the session is read from the durable store");
        mark_stale(key);
      }
    }
    if (replies[1].kind == redis::Reply::Kind::string) version = replies[1].text;
  } catch (const redis::Error& error) {
    failures_->failed(error.what(), "sessions are read from the durable store");
    return durable_->load_recent(key, max_turns);
  }
  // The cache holds a session whole: a miss reads every turn, and gives back the newest.
  std::vector<Turn> turns = durable_->load(key);
  std::vector<std::string> args = {version, ttl, std::string(kHeader)};
  for (const auto& turn : turns)
    args.push_back(turn_json(turn));
  try {
    client_->run(kFill, {base + ":turns", base + ":version"}, args);
  } catch (const redis::Error& error) {
    failures_->failed(error.what(), "a session was not cached");
  }
  if (max_turns > 0 && turns.size() > max_turns)
    turns.erase(turns.begin(), turns.end() - static_cast<std::ptrdiff_t>(max_turns));
  return turns;
}

bool RedisTurnCache::append(const SessionKey& key, Turn turn, bool durable) {
  if (turn.time == 0) turn.time = static_cast<int64_t>(std::time(nullptr));
  std::string cached = turn_json(turn);
  int64_t placed_among = turn.placed_among;
  if (!durable_->append(key, std::move(turn), durable)) return false;
  std::string base = key_of(key);
  try {
    drop_stale();
    client_->run(kAppend, {base + ":turns", base + ":version"},
                 {cached, std::to_string(ttl_.count()), std::to_string(placed_among)});
  } catch (const redis::Error& error) {
    // Another replica may hold this session's list without the turn: it goes when Redis is back.
    mark_stale(key);
    failures_->failed(error.what(), "the turn is in the durable store only");
  }
  return true;
}

std::optional<SessionPage> RedisTurnCache::list(const std::string& tenant, const std::string& owner,
                                                size_t limit, const std::string& after) {
  return durable_->list(tenant, owner, limit, after);
}

std::optional<SessionSummary> RedisTurnCache::summary(const SessionKey& key) {
  return durable_->summary(key);
}

void RedisTurnCache::drop(const std::vector<SessionKey>& keys, const std::string& consequence) {
  for (const auto& key : keys)
    mark_stale(key);
  try {
    drop_stale();
  } catch (const redis::Error& error) {
    failures_->failed(error.what(), consequence);
  }
}

bool RedisTurnCache::remove(const SessionKey& key) {
  bool removed = durable_->remove(key);
  drop({key}, "a deleted session's cached turns go when Redis is back");
  return removed;
}

std::vector<std::string> RedisTurnCache::remove_owner(const std::string& tenant,
                                                      const std::string& owner) {
  std::vector<std::string> removed = durable_->remove_owner(tenant, owner);
  std::vector<SessionKey> keys;
  for (const auto& session : removed)
    keys.push_back({tenant, owner, session});
  drop(keys, "deleted sessions' cached turns go when Redis is back");
  return removed;
}

SweepOutcome RedisTurnCache::sweep(int64_t now) {
  // Expired turns are hidden by their time; evicted sessions were marked by the listener.
  SweepOutcome outcome = durable_->sweep(now);
  drop({}, "evicted sessions' cached turns go when Redis is back");
  return outcome;
}

// The cached list is dropped rather than edited: the next load reads the switch from the
// durable store.
bool RedisTurnCache::set_active(const SessionKey& key, int64_t active_back) {
  bool switched = durable_->set_active(key, active_back);
  drop({key}, "a switched session's cached turns go when Redis is back");
  return switched;
}

std::optional<SessionSummary> RedisTurnCache::rename(const SessionKey& key,
                                                     const std::string& title) {
  return durable_->rename(key, title);
}

}  // namespace chatflow::history
