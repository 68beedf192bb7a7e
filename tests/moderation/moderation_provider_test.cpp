// The runner behind every moderation provider: checks run on its threads while the caller goes
// on, a check that waited its whole timeout in the queue is a timeout without calling the
// provider, a provider that overruns its deadline is a timeout for the waiter, and a check
// nobody waits for any more tells the provider to stop.
#include "framework/moderation/moderation_provider.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace chatflow::moderation {
namespace {

using namespace std::chrono_literals;

// Flags a text containing "bad" after `delay`, or, with `until_abandoned`, keeps going until
// told to stop (and says how it ended).
class SleepyProvider final : public ModerationProvider {
 public:
  explicit SleepyProvider(std::chrono::milliseconds delay, bool until_abandoned = false)
      : delay_(delay), until_abandoned_(until_abandoned) {}
  CheckOutcome check(const CheckInput& input) const override {
    ++calls;
    if (until_abandoned_) {
      while (!input.abandoned())
        std::this_thread::sleep_for(1ms);
      ++stopped;
      return CheckOutcome::failure("stopped");
    }
    std::this_thread::sleep_for(delay_);
    Verdict verdict;
    verdict.flagged = input.text.find("bad") != std::string::npos;
    return CheckOutcome::of(verdict);
  }
  std::string_view kind() const override { return "test"; }
  mutable std::atomic<int> calls{0};
  mutable std::atomic<int> stopped{0};

 private:
  std::chrono::milliseconds delay_;
  bool until_abandoned_;
};

CheckInput input_of(std::string text, std::chrono::milliseconds timeout) {
  CheckInput input;
  input.text = std::move(text);
  input.deadline = CheckClock::now() + timeout;
  return input;
}

TEST(ProviderRunner, ChecksRunWhileTheCallerGoesOn) {
  auto provider = std::make_shared<SleepyProvider>(100ms);
  ProviderRunner runner(provider, "guard", 2);
  auto started = CheckClock::now();
  auto bad = runner.start(input_of("a bad text", 5s));
  auto good = runner.start(input_of("a good text", 5s));
  EXPECT_LT(CheckClock::now() - started, 50ms) << "start() waited for the provider";
  EXPECT_FALSE(bad->poll());
  CheckOutcome first = bad->wait();
  CheckOutcome second = good->wait();
  ASSERT_EQ(first.kind, CheckOutcome::Kind::verdict);
  EXPECT_TRUE(first.verdict.flagged);
  ASSERT_EQ(second.kind, CheckOutcome::Kind::verdict);
  EXPECT_FALSE(second.verdict.flagged);
  EXPECT_TRUE(bad->ready());
}

TEST(ProviderRunner, ACheckQueuedPastItsDeadlineIsATimeoutWithoutACall) {
  auto provider = std::make_shared<SleepyProvider>(300ms);
  ProviderRunner runner(provider, "guard", 1);
  auto busy = runner.start(input_of("first", 5s));
  auto queued = runner.start(input_of("second", 100ms));
  CheckOutcome outcome = queued->wait();
  EXPECT_EQ(outcome.kind, CheckOutcome::Kind::timed_out);
  EXPECT_EQ(busy->wait().kind, CheckOutcome::Kind::verdict);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(provider->calls.load(), 1);
}

TEST(ProviderRunner, AProviderOverrunningItsDeadlineIsATimeoutAndIsToldToStop) {
  auto provider = std::make_shared<SleepyProvider>(0ms, /*until_abandoned=*/true);
  {
    ProviderRunner runner(provider, "guard", 1);
    auto started = CheckClock::now();
    auto check = runner.start(input_of("text", 100ms));
    CheckOutcome outcome = check->wait();
    EXPECT_EQ(outcome.kind, CheckOutcome::Kind::timed_out);
    EXPECT_LT(CheckClock::now() - started, 1s);
  }  // the runner waits for its threads: the provider must have stopped
  EXPECT_EQ(provider->stopped.load(), 1);
}

TEST(ProviderRunner, AnAbandonedCheckStopsTheProvider) {
  auto provider = std::make_shared<SleepyProvider>(0ms, /*until_abandoned=*/true);
  ProviderRunner runner(provider, "guard", 1);
  auto check = runner.start(input_of("text", 10s));
  auto limit = CheckClock::now() + 5s;
  while (provider->calls.load() == 0 && CheckClock::now() < limit)
    std::this_thread::sleep_for(1ms);
  check->abandon();
  while (provider->stopped.load() == 0 && CheckClock::now() < limit)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(provider->stopped.load(), 1);
}

TEST(ProviderRunner, EveryCheckEndsByItsDeadlineWithoutAnyoneWaiting) {
  auto provider = std::make_shared<SleepyProvider>(0ms, /*until_abandoned=*/true);
  ProviderRunner runner(provider, "guard", 1);
  std::atomic<int> called{0};
  auto running = runner.start(input_of("runs", 100ms));
  auto queued = runner.start(input_of("waits for the thread", 150ms));
  runner.when_settled(running, [&] { ++called; });
  runner.when_settled(queued, [&] { ++called; });
  auto limit = CheckClock::now() + 5s;
  while (called.load() < 2 && CheckClock::now() < limit)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(called.load(), 2);
  ASSERT_TRUE(running->poll());
  EXPECT_EQ(running->poll()->kind, CheckOutcome::Kind::timed_out);
  EXPECT_EQ(queued->poll()->kind, CheckOutcome::Kind::timed_out);
}

TEST(ProviderRunner, ACallbackForASettledCheckRunsOnTheRunnersThreadNotTheCallers) {
  auto provider = std::make_shared<SleepyProvider>(0ms);
  ProviderRunner runner(provider, "guard", 1);
  auto check = runner.start(input_of("text", 5s));
  ASSERT_EQ(check->wait().kind, CheckOutcome::Kind::verdict);
  std::atomic<bool> ran{false};
  std::thread::id ran_on;
  // The caller holds a lock the callback takes: run here, the callback would deadlock.
  std::mutex held;
  {
    std::lock_guard lock(held);
    runner.when_settled(check, [&] {
      std::lock_guard inner(held);
      ran_on = std::this_thread::get_id();
      ran = true;
    });
  }
  auto limit = CheckClock::now() + 5s;
  while (!ran && CheckClock::now() < limit)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(ran);
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

// Keeps each check going until it is abandoned or `patience` has passed; counts the checks that
// were told to stop.
class PatientProvider final : public ModerationProvider {
 public:
  explicit PatientProvider(std::chrono::milliseconds patience) : patience_(patience) {}
  CheckOutcome check(const CheckInput& input) const override {
    ++calls;
    for (auto until = CheckClock::now() + patience_; CheckClock::now() < until;) {
      if (input.abandoned()) {
        ++stopped;
        return CheckOutcome::failure("stopped");
      }
      std::this_thread::sleep_for(1ms);
    }
    return CheckOutcome::failure("gave up waiting");
  }
  std::string_view kind() const override { return "test"; }
  mutable std::atomic<int> calls{0};
  mutable std::atomic<int> stopped{0};

 private:
  std::chrono::milliseconds patience_;
};

// A pipeline torn down (after a reload) destroys its runners, which join their threads: checks
// still running are abandoned first, so the join does not wait out a provider call's timeout.
TEST(ProviderRunner, DestroyingTheRunnerStopsTheChecksStillRunning) {
  auto provider = std::make_shared<PatientProvider>(3s);
  auto runner = std::make_unique<ProviderRunner>(provider, "guard", 2);
  auto first = runner->start(input_of("one", 60s));
  auto second = runner->start(input_of("two", 60s));
  auto limit = CheckClock::now() + 5s;
  while (provider->calls.load() < 2 && CheckClock::now() < limit)
    std::this_thread::sleep_for(1ms);
  ASSERT_EQ(provider->calls.load(), 2);
  runner.reset();
  EXPECT_EQ(provider->stopped.load(), 2);
  ASSERT_TRUE(first->poll());
  ASSERT_TRUE(second->poll());
  EXPECT_EQ(first->poll()->kind, CheckOutcome::Kind::failed);
}

TEST(PendingCheck, TheFirstOutcomeWins) {
  PendingCheck check(CheckClock::now() + 1s);
  check.settle(CheckOutcome::failure("first"));
  check.settle(CheckOutcome::of(Verdict{true, {"S1"}}));
  ASSERT_TRUE(check.poll());
  EXPECT_EQ(check.poll()->kind, CheckOutcome::Kind::failed);
  EXPECT_EQ(check.poll()->error, "first");
}

// A provider that slows down under a flood must not let checks pile up: past the runner's bound a
// new check is settled at once as a failure (the stage's on_error decides), and the provider is
// not called for it.
TEST(ProviderRunner, PastItsBoundANewCheckFailsAtOnce) {
  auto provider = std::make_shared<SleepyProvider>(0ms, /*until_abandoned=*/true);
  ProviderRunner runner(provider, "guard", 1, /*max_outstanding=*/2);
  auto running = runner.start(input_of("runs", 60s));
  auto queued = runner.start(input_of("waits", 60s));
  auto refused = runner.start(input_of("one too many", 60s));
  auto limit = CheckClock::now() + 5s;
  // Each check is abandoned only once the provider has it (abandoned in the queue, it would
  // never reach the provider).
  auto wait_for_calls = [&](int calls) {
    while (provider->calls.load() < calls && CheckClock::now() < limit)
      std::this_thread::sleep_for(1ms);
  };
  std::optional<CheckOutcome> outcome = refused->poll();
  EXPECT_TRUE(outcome) << "not settled at once";
  if (outcome) {
    EXPECT_EQ(outcome->kind, CheckOutcome::Kind::failed);
    EXPECT_EQ(outcome->error, "2 checks already wait for it");
  }
  EXPECT_EQ(runner.outstanding(), 2u);
  wait_for_calls(1);
  running->abandon();  // the provider stops, and the queued check runs
  while (runner.outstanding() > 1 && CheckClock::now() < limit)
    std::this_thread::sleep_for(1ms);
  auto accepted = runner.start(input_of("room again", 60s));
  EXPECT_FALSE(accepted->poll()) << "refused although a check had settled";
  EXPECT_EQ(runner.outstanding(), 2u);
  wait_for_calls(2);
  queued->abandon();  // the accepted check runs next
  wait_for_calls(3);
  accepted->abandon();
  refused->abandon();  // in case it was not refused: the runner's threads end
  while (runner.outstanding() > 0 && CheckClock::now() < limit)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(provider->calls.load(), 3) << "the refused check reached the provider";
}

}  // namespace
}  // namespace chatflow::moderation
