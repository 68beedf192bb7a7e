#include "framework/moderation/moderation_provider.h"

#include <algorithm>

namespace chatflow::moderation {

std::string_view to_string(OnError on_error) {
  return on_error == OnError::fail_open ? "fail_open" : "fail_closed";
}

std::string_view to_string(CheckOutcome::Kind kind) {
  switch (kind) {
    case CheckOutcome::Kind::verdict:
      return "verdict";
    case CheckOutcome::Kind::timed_out:
      return "timeout";
    case CheckOutcome::Kind::failed:
      return "error";
  }
  return "error";
}

std::string milliseconds_text(CheckClock::duration duration) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(duration).count()) +
         " ms";
}

bool PendingCheck::on_settled(std::function<void()> callback) {
  std::lock_guard lock(mutex_);
  if (outcome_) return false;
  callbacks_.push_back(std::move(callback));
  return true;
}

bool PendingCheck::ready() const {
  std::lock_guard lock(mutex_);
  return outcome_.has_value();
}

std::optional<CheckOutcome> PendingCheck::poll() const {
  std::lock_guard lock(mutex_);
  return outcome_;
}

CheckOutcome PendingCheck::wait_until(CheckClock::time_point until) {
  {
    std::unique_lock lock(mutex_);
    if (settled_.wait_until(lock, until, [&] { return outcome_.has_value(); })) return *outcome_;
    // The provider overran its own deadline: the outcome is a timeout from here on, whatever it
    // says later.
    abandoned_ = true;
  }
  settle(CheckOutcome::timeout("no answer within the timeout"));
  return *poll();
}

void PendingCheck::settle(CheckOutcome outcome) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mutex_);
    if (outcome_) return;
    outcome_ = std::move(outcome);
    callbacks.swap(callbacks_);
  }
  settled_.notify_all();
  for (auto& callback : callbacks)
    callback();
}

void PendingCheck::abandon() {
  std::lock_guard lock(mutex_);
  abandoned_ = true;
}

bool PendingCheck::abandoned() const {
  std::lock_guard lock(mutex_);
  return abandoned_;
}

ProviderRunner::ProviderRunner(std::shared_ptr<const ModerationProvider> provider, std::string name,
                               size_t threads, size_t max_outstanding)
    : provider_(std::move(provider)),
      name_(std::move(name)),
      max_outstanding_(std::max<size_t>(max_outstanding, 1)) {
  threads = std::max<size_t>(threads, 1);
  for (size_t i = 0; i < threads; ++i)
    threads_.emplace_back([this] { work(); });
  watch_thread_ = std::thread([this] { watch(); });
}

ProviderRunner::~ProviderRunner() {
  std::deque<Job> left;
  std::vector<std::shared_ptr<PendingCheck>> outstanding;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    left.swap(queue_);
    for (auto& [deadline, watched] : deadlines_) {
      if (auto check = watched.lock()) outstanding.push_back(std::move(check));
    }
    deadlines_.clear();
  }
  // The checks still running are told to stop, so the joins below wait for providers to notice
  // (an HTTP call looks every 20 ms), not for their timeouts: a pipeline torn down after a
  // reload is gone in moments.
  for (auto& check : outstanding)
    check->abandon();
  wake_.notify_all();
  watch_wake_.notify_all();
  for (auto& job : left) {
    if (job.callback) {
      job.callback();
    } else {
      job.pending->settle(CheckOutcome::failure("the moderation stage was shut down"));
    }
  }
  for (auto& thread : threads_)
    thread.join();
  watch_thread_.join();
}

std::shared_ptr<PendingCheck> ProviderRunner::start(CheckInput input) {
  auto pending = std::make_shared<PendingCheck>(input.deadline);
  if (outstanding_->fetch_add(1) >= max_outstanding_) {
    outstanding_->fetch_sub(1);
    pending->settle(
        CheckOutcome::failure(std::to_string(max_outstanding_) + " checks already wait for it"));
    return pending;
  }
  pending->on_settled([outstanding = outstanding_] { outstanding->fetch_sub(1); });
  std::weak_ptr<PendingCheck> watched = pending;
  input.abandoned = [watched] {
    auto check = watched.lock();
    return !check || check->abandoned();
  };
  bool earliest = false;
  {
    std::lock_guard lock(mutex_);
    if (deadlines_.size() >= 2 * max_outstanding_) forget_settled_deadlines();
    earliest = deadlines_.empty() || pending->deadline() < deadlines_.begin()->first;
    deadlines_.emplace(pending->deadline(), pending);
    queue_.push_back({std::move(input), pending, {}});
  }
  wake_.notify_one();
  if (earliest) watch_wake_.notify_one();
  return pending;
}

void ProviderRunner::when_settled(const std::shared_ptr<PendingCheck>& check,
                                  std::function<void()> callback) {
  if (check->on_settled(callback)) return;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({{}, nullptr, std::move(callback)});
  }
  wake_.notify_one();
}

void ProviderRunner::forget_settled_deadlines() {
  // Past the bound only one in two entries can be outstanding: dropping the rest makes this
  // rare (once per max_outstanding starts at most).
  std::erase_if(deadlines_, [](const auto& entry) {
    auto check = entry.second.lock();
    return !check || check->ready();
  });
}

void ProviderRunner::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (deadlines_.empty()) {
      watch_wake_.wait(lock);
      continue;
    }
    auto due = deadlines_.begin()->first + kGrace;
    if (CheckClock::now() < due) {
      watch_wake_.wait_until(lock, due);
      continue;
    }
    std::shared_ptr<PendingCheck> check = deadlines_.begin()->second.lock();
    deadlines_.erase(deadlines_.begin());
    if (!check || check->ready()) continue;
    lock.unlock();
    check->abandon();
    check->settle(CheckOutcome::timeout("no answer within the timeout"));
    lock.lock();
  }
}

void ProviderRunner::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    if (job.callback) {
      job.callback();
      continue;
    }
    if (job.pending->abandoned()) {
      job.pending->settle(CheckOutcome::failure("abandoned"));
      continue;
    }
    if (CheckClock::now() >= job.input.deadline) {
      job.pending->settle(
          CheckOutcome::timeout("the check waited its whole timeout for a free thread"));
      continue;
    }
    job.pending->settle(provider_->check(job.input));
  }
}

}  // namespace chatflow::moderation
