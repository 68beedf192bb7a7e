// The memory history store (tests, development): every session in a map, gone with the process.
// Expired turns are removed before every operation, so what it answers never holds one.
#include <algorithm>
#include <ctime>
#include <set>

#include "framework/history/history_store.h"
#include "framework/history/session_title.h"

namespace chatflow::history {
namespace {

int64_t unix_now() {
  return static_cast<int64_t>(std::time(nullptr));
}

class MemoryStore final : public HistoryStore {
 public:
  explicit MemoryStore(Retention retention) : retention_(retention) {}

  std::vector<Turn> load(const SessionKey& key) override { return load_recent(key, 0); }

  std::vector<Turn> load_recent(const SessionKey& key, size_t max_turns) override {
    std::lock_guard lock(mutex_);
    expire_locked(unix_now());
    auto found = sessions_.find(key);
    if (found == sessions_.end()) return {};
    const std::vector<Turn>& turns = found->second.turns;
    size_t skip = max_turns == 0 || turns.size() <= max_turns ? 0 : turns.size() - max_turns;
    return {turns.begin() + static_cast<std::ptrdiff_t>(skip), turns.end()};
  }

  bool append(const SessionKey& key, Turn turn, bool) override {
    int64_t now = unix_now();
    if (turn.time == 0) turn.time = now;
    std::vector<SessionKey> evicted_keys;
    {
      std::lock_guard lock(mutex_);
      expire_locked(now);
      bool starts = !sessions_.count(key);
      Session& session = sessions_[key];
      session.turns.push_back(std::move(turn));
      session.last_turn = ++turns_written_;
      if (starts) evicted_keys = evict_past_limit_locked(key.tenant, key.owner);
    }
    evicted(evicted_keys);
    return true;
  }

  std::optional<SessionPage> list(const std::string& tenant, const std::string& owner, size_t limit,
                                  const std::string& after) override {
    std::lock_guard lock(mutex_);
    expire_locked(unix_now());
    std::vector<const SessionKey*> order = by_activity_locked(tenant, owner);
    size_t start = 0;
    if (!after.empty()) {
      auto cursor = std::find_if(order.begin(), order.end(),
                                 [&](const SessionKey* key) { return key->session == after; });
      if (cursor == order.end()) return std::nullopt;
      start = static_cast<size_t>(cursor - order.begin()) + 1;
    }
    SessionPage page;
    for (size_t i = start; i < order.size(); ++i) {
      if (page.sessions.size() == limit) {
        page.has_more = true;
        break;
      }
      page.sessions.push_back(summary_locked(*order[i]));
    }
    return page;
  }

  std::optional<SessionSummary> summary(const SessionKey& key) override {
    std::lock_guard lock(mutex_);
    expire_locked(unix_now());
    if (!sessions_.count(key)) return std::nullopt;
    return summary_locked(key);
  }

  bool remove(const SessionKey& key) override {
    std::lock_guard lock(mutex_);
    expire_locked(unix_now());
    return sessions_.erase(key) > 0;
  }

  std::optional<SessionSummary> rename(const SessionKey& key, const std::string& title) override {
    std::lock_guard lock(mutex_);
    expire_locked(unix_now());
    auto found = sessions_.find(key);
    if (found == sessions_.end()) return std::nullopt;
    found->second.title = title;
    return summary_locked(key);
  }

  bool set_active(const SessionKey& key, int64_t active_back) override {
    std::lock_guard lock(mutex_);
    expire_locked(unix_now());
    auto found = sessions_.find(key);
    if (found == sessions_.end() || found->second.turns.empty()) return false;
    found->second.turns.back().active_back = active_back;
    return true;
  }

  std::vector<std::string> remove_owner(const std::string& tenant,
                                        const std::string& owner) override {
    std::lock_guard lock(mutex_);
    expire_locked(unix_now());
    std::vector<std::string> removed;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->first.tenant == tenant && it->first.owner == owner) {
        removed.push_back(it->first.session);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
    std::erase_if(responses_, [&](const auto& entry) {
      return entry.first.tenant == tenant && entry.first.owner == owner;
    });
    return removed;
  }

  void keep_response(const SessionKey& key, const KeptResponse& response, int64_t time) override {
    std::lock_guard lock(mutex_);
    responses_[key] = {response, time};
    if (retention_.max_responses_per_owner <= 0) return;
    // The owner's responses lie together in the map: the oldest past the limit go, never the
    // one just kept.
    for (;;) {
      auto first = responses_.lower_bound({key.tenant, key.owner, ""});
      auto oldest = responses_.end();
      int64_t count = 0;
      for (auto it = first;
           it != responses_.end() && it->first.tenant == key.tenant && it->first.owner == key.owner;
           ++it) {
        ++count;
        if (it->first == key) continue;
        if (oldest == responses_.end() || it->second.second < oldest->second.second ||
            (it->second.second == oldest->second.second &&
             it->first.session < oldest->first.session))
          oldest = it;
      }
      if (count <= retention_.max_responses_per_owner || oldest == responses_.end()) return;
      responses_.erase(oldest);
    }
  }

  std::optional<KeptResponse> kept_response(const SessionKey& key) override {
    std::lock_guard lock(mutex_);
    auto found = responses_.find(key);
    if (found == responses_.end() || found->second.second < retention_.expired_before(unix_now()))
      return std::nullopt;
    return found->second.first;
  }

  bool forget_response(const SessionKey& key) override {
    std::lock_guard lock(mutex_);
    return responses_.erase(key) > 0;
  }

  SweepOutcome sweep(int64_t now) override {
    SweepOutcome outcome;
    std::vector<SessionKey> evicted_keys;
    {
      std::lock_guard lock(mutex_);
      outcome.expired_turns = expire_locked(now);
      std::erase_if(responses_, [&](const auto& entry) {
        return entry.second.second < retention_.expired_before(now);
      });
      std::set<std::pair<std::string, std::string>> owners;
      for (const auto& [key, session] : sessions_)
        owners.insert({key.tenant, key.owner});
      for (const auto& [tenant, owner] : owners) {
        auto gone = evict_past_limit_locked(tenant, owner);
        evicted_keys.insert(evicted_keys.end(), gone.begin(), gone.end());
      }
    }
    outcome.evicted_sessions = static_cast<int64_t>(evicted_keys.size());
    evicted(evicted_keys);
    return outcome;
  }

 private:
  struct Session {
    std::vector<Turn> turns;  // never empty
    std::string title;
    int64_t last_turn = 0;  // when its last turn came, counting the store's turns
  };

  // Removes the turns written before the TTL (and sessions left without one); returns how many.
  int64_t expire_locked(int64_t now) {
    int64_t cutoff = retention_.expired_before(now);
    if (retention_.ttl_days <= 0) return 0;
    int64_t removed = 0;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto& turns = it->second.turns;
      auto live = std::remove_if(turns.begin(), turns.end(),
                                 [&](const Turn& turn) { return turn.time < cutoff; });
      removed += turns.end() - live;
      turns.erase(live, turns.end());
      it = turns.empty() ? sessions_.erase(it) : std::next(it);
    }
    return removed;
  }

  // The owner's sessions, latest activity first.
  std::vector<const SessionKey*> by_activity_locked(const std::string& tenant,
                                                    const std::string& owner) const {
    std::vector<std::pair<int64_t, const SessionKey*>> order;
    for (const auto& [key, session] : sessions_) {
      if (key.tenant == tenant && key.owner == owner) order.push_back({session.last_turn, &key});
    }
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<const SessionKey*> keys;
    for (const auto& entry : order)
      keys.push_back(entry.second);
    return keys;
  }

  // Removes the owner's least recently active sessions past the limit; returns them.
  std::vector<SessionKey> evict_past_limit_locked(const std::string& tenant,
                                                  const std::string& owner) {
    if (retention_.max_sessions_per_owner <= 0) return {};
    std::vector<const SessionKey*> order = by_activity_locked(tenant, owner);
    std::vector<SessionKey> gone;
    for (size_t i = static_cast<size_t>(retention_.max_sessions_per_owner); i < order.size(); ++i)
      gone.push_back(*order[i]);
    for (const auto& key : gone)
      sessions_.erase(key);
    return gone;
  }

  SessionSummary summary_locked(const SessionKey& key) const {
    const Session& session = sessions_.at(key);
    const std::string& title = session.title;
    return {key.session, title.empty() ? title_from_message(session.turns.front().user) : title,
            session.turns.front().time, session.turns.back().time,
            static_cast<int64_t>(session.turns.size())};
  }

  Retention retention_;
  std::mutex mutex_;
  std::map<SessionKey, Session> sessions_;
  std::map<SessionKey, std::pair<KeptResponse, int64_t>> responses_;  // and when each was kept
  int64_t turns_written_ = 0;
};

}  // namespace

std::unique_ptr<HistoryStore> make_memory_store(Retention retention) {
  return std::make_unique<MemoryStore>(retention);
}

}  // namespace chatflow::history
