#include "framework/security/jwks_cache.h"

#include <iostream>
#include <stdexcept>

namespace chatflow::security {
namespace {

std::string key_ids(const JsonWebKeySet& set) {
  std::string out;
  for (const auto& key : set.keys)
    out += (out.empty() ? "" : ", ") + (key.key_id.empty() ? std::string("(no kid)") : key.key_id);
  return out;
}

}  // namespace

JwksCache::JwksCache(Settings settings) : settings_(std::move(settings)) {
  last_fetch_started_ = Clock::now();
  try {
    set_ = fetch_once();
  } catch (const std::exception& error) {
    throw std::runtime_error("the key set at " + settings_.source +
                             " cannot be used: " + error.what());
  }
  begun_ = ended_ = 1;
  for (const auto& line : set_->skipped)
    say("chatflow: key set " + settings_.source + ": " + line + "\n");
  next_periodic_ = settings_.refresh_interval.count() > 0
                       ? Clock::now() + settings_.refresh_interval
                       : Clock::time_point::max();
  thread_ = std::thread([this] { refresher(); });
}

JwksCache::~JwksCache() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
  // Nobody may be left waiting for a fetch that will never come.
  for (auto& then : ready_)
    then();
  for (auto& [fetch, then] : waiting_)
    then();
}

std::shared_ptr<const JsonWebKeySet> JwksCache::fetch_once() {
  std::string text = settings_.fetch(Clock::now() + settings_.fetch_timeout);
  return std::make_shared<const JsonWebKeySet>(parse_jwks(text, settings_.algorithm));
}

void JwksCache::refresher() {
  std::unique_lock lock(mutex_);
  while (true) {
    auto due = [this] {
      return stopping_ || asked_ || !ready_.empty() || Clock::now() >= next_periodic_;
    };
    if (next_periodic_ == Clock::time_point::max()) {
      changed_.wait(lock, due);
    } else {
      changed_.wait_until(lock, next_periodic_, due);
    }
    if (stopping_) return;
    if (!ready_.empty()) {
      std::vector<std::function<void()>> callbacks = std::move(ready_);
      ready_.clear();
      lock.unlock();
      for (auto& then : callbacks)
        then();
      lock.lock();
      continue;
    }
    asked_ = false;
    int64_t number = ++begun_;
    last_fetch_started_ = Clock::now();
    lock.unlock();
    std::shared_ptr<const JsonWebKeySet> fetched;
    std::string failure;
    try {
      fetched = fetch_once();
    } catch (const std::exception& error) {
      failure = error.what();
    }
    lock.lock();
    std::vector<std::function<void()>> callbacks = end_fetch(number, std::move(fetched), failure);
    // The callbacks look keys up (and resume requests): not under the lock.
    lock.unlock();
    for (auto& then : callbacks)
      then();
    lock.lock();
  }
}

std::vector<std::function<void()>> JwksCache::end_fetch(
    int64_t number, std::shared_ptr<const JsonWebKeySet> fetched, const std::string& failure) {
  auto now = Clock::now();
  bool usable = fetched != nullptr;
  if (fetched) {
    if (key_ids(*fetched) != key_ids(*set_)) {
      say("chatflow: key set " + settings_.source + " now holds: " + key_ids(*fetched) + "\n");
      for (const auto& line : fetched->skipped)
        say("chatflow: key set " + settings_.source + ": " + line + "\n");
    }
    set_ = std::move(fetched);
  } else {
    say("chatflow: keeping the key set in use (" + key_ids(*set_) + "); fetching " +
        settings_.source + " failed: " + failure + "\n");
  }
  ended_ = number;
  std::erase_if(awaited_by_kid_, [&](const auto& entry) { return entry.second <= number; });
  std::vector<std::function<void()>> callbacks;
  std::erase_if(waiting_, [&](auto& entry) {
    if (entry.first > number) return false;
    callbacks.push_back(std::move(entry.second));
    return true;
  });
  // After a failure, try again sooner than the next periodic fetch.
  auto interval = settings_.refresh_interval;
  if (!usable && (interval.count() == 0 || settings_.min_refresh_interval < interval))
    interval = settings_.min_refresh_interval;
  next_periodic_ = interval.count() > 0 ? now + interval : Clock::time_point::max();
  return callbacks;
}

JwksCache::Lookup JwksCache::lookup(const JwtHeader& header, Asker asker) {
  std::lock_guard lock(mutex_);
  if (!header.key_id || set_->has(*header.key_id)) return {set_->key_for(header), 0};
  // An unknown kid: perhaps the provider rotated its keys since the last fetch.
  const std::string& kid = *header.key_id;
  if (asker == Asker::returning_request) {
    if (auto asked = awaited_by_kid_.find(kid); asked != awaited_by_kid_.end())
      return {std::nullopt, asked->second};
  }
  int64_t next = begun_ + 1;
  if (asked_) {
    // The fetch asked for a moment ago has not begun: it serves this kid too.
    awaited_by_kid_.emplace(kid, next);
    return {std::nullopt, next};
  }
  bool idle = begun_ == ended_;
  if (idle && !stopping_ && Clock::now() - last_fetch_started_ >= settings_.min_refresh_interval) {
    asked_ = true;
    awaited_by_kid_[kid] = next;
    changed_.notify_all();
    return {std::nullopt, next};
  }
  set_->key_for(header);  // throws: not known, and no fetch may bring it now
  return {};
}

void JwksCache::when_fetched(int64_t fetch, std::function<void()> then) {
  {
    std::lock_guard lock(mutex_);
    if (ended_ < fetch) {
      waiting_.emplace_back(fetch, std::move(then));
      return;
    }
    ready_.push_back(std::move(then));
  }
  changed_.notify_all();
}

VerificationKey JwksCache::current_key(const JwtHeader& header) const {
  std::shared_ptr<const JsonWebKeySet> set;
  {
    std::lock_guard lock(mutex_);
    set = set_;
  }
  return set->key_for(header);
}

int64_t JwksCache::fetches() const {
  std::lock_guard lock(mutex_);
  return begun_;
}

void JwksCache::say(const std::string& message) const {
  if (settings_.log) {
    settings_.log(message);
  } else {
    std::cerr << message;
  }
}

}  // namespace chatflow::security
