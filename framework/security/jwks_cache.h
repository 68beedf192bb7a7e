// An identity provider's key set, kept fresh while serving: fetched at start (a set that cannot
// be fetched, or holds no usable key, stops the start), then again every refresh interval on a
// thread of its own, off the request path.
//
// When the provider rotates its keys, the first token signed with a new key names a `kid` the
// cache has not seen: that asks for a fetch at once. Nothing here ever waits for a fetch: a
// lookup answers at once with the key, with the number of the fetch whose end decides, or with
// a refusal; a caller that can wait without holding a thread (the auth stage, deferred) asks to
// be called back when that fetch has ended (when_fetched).
//
// Fetches asked for by unknown kids are rate-limited: one may begin only when no fetch is under
// way and none began less than min_refresh_interval ago, so a flood of tokens with made-up kids
// costs the provider at most one fetch per interval and each such request a 401 at once. A new
// request waits only for a fetch that has not begun yet (the one it asked for, or one asked for
// a moment before): never for a periodic refresh or another fetch already under way. A fetch
// that fails or brings no usable key keeps the set in use, and says why in the log.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "framework/security/jwks.h"

namespace chatflow::security {

class JwksCache {
 public:
  using Clock = std::chrono::steady_clock;

  struct Settings {
    std::string source;  // the URL or file, for the log and errors
    // The key set's text, fetched by `deadline`; throws std::runtime_error saying why not. It must
    // return by the deadline: requests whose kid asked for the fetch wait for its end.
    std::function<std::string(Clock::time_point deadline)> fetch;
    std::string algorithm;  // the configured algorithm; empty: each key's own
    std::chrono::milliseconds refresh_interval{300'000};     // 0: only at start and on unknown kids
    std::chrono::milliseconds min_refresh_interval{30'000};  // between fetches unknown kids cause
    std::chrono::milliseconds fetch_timeout{2'000};          // one fetch
    std::function<void(const std::string&)> log;             // default: standard error
  };

  // Who looks a kid up, and so which fetch it may wait for.
  enum class Asker {
    // A request seen for the first time (the server's header check): only a fetch that has not
    // begun yet.
    new_request,
    // A request seen before (the auth stage, after the header check): also the fetch its kid
    // asked for then, which may have begun since.
    returning_request,
  };

  // What a token's header leads to, decided without waiting.
  struct Lookup {
    std::optional<VerificationKey> key;  // the key, when the set holds it
    int64_t awaited_fetch = 0;           // otherwise the fetch whose end decides (when_fetched)
  };

  // Fetches the set once; throws std::runtime_error, naming the source, when it cannot be
  // fetched or holds no usable key.
  explicit JwksCache(Settings settings);
  // Stops the refresher; callbacks still waiting are called (they find the set as it is).
  ~JwksCache();
  JwksCache(const JwksCache&) = delete;
  JwksCache& operator=(const JwksCache&) = delete;

  // Never waits. The key for a known kid; for an unknown kid, the fetch that may bring it (asked
  // for now when allowed). Throws JwtError when there is no key and no fetch to wait for.
  Lookup lookup(const JwtHeader& header, Asker asker);
  // Calls `then` on the refresher's thread once fetch number `fetch` has ended (soon, when it
  // has already), never on the caller's; at the latest when the cache is destroyed.
  void when_fetched(int64_t fetch, std::function<void()> then);
  // The key for this header in the set in use now; never fetches. Throws JwtError.
  VerificationKey current_key(const JwtHeader& header) const;

  // How many fetches were begun, the one at start and failed ones included.
  int64_t fetches() const;

 private:
  std::shared_ptr<const JsonWebKeySet> fetch_once();
  void refresher();
  // Ends fetch `number` (under the lock): the set, the log, what waits for it.
  std::vector<std::function<void()>> end_fetch(int64_t number,
                                               std::shared_ptr<const JsonWebKeySet> fetched,
                                               const std::string& failure);
  void say(const std::string& message) const;

  Settings settings_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::shared_ptr<const JsonWebKeySet> set_;
  Clock::time_point last_fetch_started_;
  Clock::time_point next_periodic_;
  bool asked_ = false;  // an unknown kid asked for a fetch that has not begun
  bool stopping_ = false;
  int64_t begun_ = 0;  // fetches begun; the numbers of fetches count from 1
  int64_t ended_ = 0;
  // The fetch each unknown kid asked for (or joined), until that fetch has ended.
  std::map<std::string, int64_t> awaited_by_kid_;
  std::vector<std::pair<int64_t, std::function<void()>>> waiting_;
  std::vector<std::function<void()>> ready_;  // their fetch has ended: for the refresher to call
  std::thread thread_;
};

}  // namespace chatflow::security
