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
  completed_ = 1;
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
}

std::shared_ptr<const JsonWebKeySet> JwksCache::fetch_once() {
  std::string text = settings_.fetch(Clock::now() + settings_.fetch_timeout);
  return std::make_shared<const JsonWebKeySet>(parse_jwks(text, settings_.algorithm));
}

void JwksCache::refresher() {
  std::unique_lock lock(mutex_);
  while (true) {
    auto due = [this] { return stopping_ || asked_ || Clock::now() >= next_periodic_; };
    if (next_periodic_ == Clock::time_point::max()) {
      changed_.wait(lock, due);
    } else {
      changed_.wait_until(lock, next_periodic_, due);
    }
    if (stopping_) return;
    asked_ = false;
    in_flight_ = true;
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
    auto now = Clock::now();
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
    in_flight_ = false;
    ++completed_;
    // After a failure, try again sooner than the next periodic fetch.
    auto interval = settings_.refresh_interval;
    if (!fetched && (interval.count() == 0 || settings_.min_refresh_interval < interval))
      interval = settings_.min_refresh_interval;
    next_periodic_ = interval.count() > 0 ? now + interval : Clock::time_point::max();
    changed_.notify_all();
  }
}

VerificationKey JwksCache::key_for(const JwtHeader& header) {
  std::unique_lock lock(mutex_);
  if (!header.key_id || set_->has(*header.key_id)) return set_->key_for(header);
  // An unknown kid: perhaps the provider rotated its keys since the last fetch.
  if (!in_flight_ && !asked_) {
    if (Clock::now() - last_fetch_started_ < settings_.min_refresh_interval)
      return set_->key_for(header);  // throws: not known, and no fetch allowed yet
    asked_ = true;
    changed_.notify_all();
  }
  int64_t awaited = completed_ + 1;
  changed_.wait_for(lock, settings_.fetch_timeout,
                    [&] { return stopping_ || completed_ >= awaited; });
  return set_->key_for(header);
}

int64_t JwksCache::fetches() const {
  std::lock_guard lock(mutex_);
  return completed_ + (in_flight_ ? 1 : 0);
}

void JwksCache::say(const std::string& message) const {
  if (settings_.log) {
    settings_.log(message);
  } else {
    std::cerr << message;
  }
}

}  // namespace chatflow::security
