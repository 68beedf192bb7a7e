// An identity provider's key set, kept fresh while serving: fetched at start (a set that cannot
// be fetched, or holds no usable key, stops the start), then again every refresh interval on a
// thread of its own, off the request path.
//
// When the provider rotates its keys, the first token signed with a new key names a `kid` the
// cache has not seen: that asks for a fetch at once, and the request waits for it, at most
// fetch_timeout. Such fetches are rate-limited: none when the last fetch of any kind began less
// than min_refresh_interval ago, so a flood of tokens with made-up kids costs the provider at
// most one fetch per interval (and each such request a 401 without waiting). A fetch that fails
// or brings no usable key keeps the set in use, and says why in the log.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "framework/security/jwks.h"

namespace chatflow::security {

class JwksCache {
 public:
  using Clock = std::chrono::steady_clock;

  struct Settings {
    std::string source;  // the URL or file, for the log and errors
    // The key set's text, fetched by `deadline`; throws std::runtime_error saying why not.
    std::function<std::string(Clock::time_point deadline)> fetch;
    std::string algorithm;  // the configured algorithm; empty: each key's own
    std::chrono::milliseconds refresh_interval{300'000};     // 0: only at start and on unknown kids
    std::chrono::milliseconds min_refresh_interval{30'000};  // between fetches unknown kids cause
    std::chrono::milliseconds fetch_timeout{2'000};  // one fetch, and a request's wait for it
    std::function<void(const std::string&)> log;     // default: standard error
  };

  // Fetches the set once; throws std::runtime_error, naming the source, when it cannot be
  // fetched or holds no usable key.
  explicit JwksCache(Settings settings);
  ~JwksCache();
  JwksCache(const JwksCache&) = delete;
  JwksCache& operator=(const JwksCache&) = delete;

  // The key a token with this header is checked with. An unknown kid may fetch the set again
  // first (see above); throws JwtError when there is no key for it.
  VerificationKey key_for(const JwtHeader& header);

  // How many fetches were made, failed ones included.
  int64_t fetches() const;

 private:
  std::shared_ptr<const JsonWebKeySet> fetch_once();
  void refresher();
  void say(const std::string& message) const;

  Settings settings_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::shared_ptr<const JsonWebKeySet> set_;
  Clock::time_point last_fetch_started_;
  Clock::time_point next_periodic_;
  bool asked_ = false;
  bool in_flight_ = false;
  bool stopping_ = false;
  int64_t completed_ = 0;
  std::thread thread_;
};

}  // namespace chatflow::security
