// A moderation provider: something outside the rule lists that judges a text, such as an HTTP
// service in the shape of OpenAI's /v1/moderations (openai_moderation.h) or a Llama Guard-style
// classifier model (llama_guard.h). A provider's check is a blocking call with a deadline; the
// ProviderRunner runs checks on threads of its own, so a stage can start one and keep going
// (output moderation keeps streaming while the answer so far is judged) or wait for it (input
// moderation, before the model).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace chatflow::moderation {

using CheckClock = std::chrono::steady_clock;

// What a provider said about one text.
struct Verdict {
  bool flagged = false;
  // The categories that tripped, in the provider's words ("violence", "S1"); a flagged verdict
  // without categories names none.
  std::vector<std::string> categories;
};

// One check's outcome: a verdict, or why there is none.
struct CheckOutcome {
  enum class Kind { verdict, timed_out, failed };
  Kind kind = Kind::failed;
  Verdict verdict;
  std::string error;  // timed_out, failed: what happened, for logs and error messages

  static CheckOutcome of(Verdict verdict) { return {Kind::verdict, std::move(verdict), {}}; }
  static CheckOutcome timeout(std::string error) { return {Kind::timed_out, {}, std::move(error)}; }
  static CheckOutcome failure(std::string error) { return {Kind::failed, {}, std::move(error)}; }
};

// Whose words are judged: the user's (input moderation) or the model's answer (output).
enum class Speaker { user, assistant };

struct CheckInput {
  std::string text;  // what is judged
  Speaker speaker = Speaker::user;
  std::string question;  // assistant: the question it answers (context for a classifier)
  CheckClock::time_point deadline;
  std::string request_id;  // sent along where the provider takes it (X-Request-Id)
  std::string tenant;      // salts a local model's prefix cache
  // True once nobody waits for the outcome any more (set by the runner): stop early.
  std::function<bool()> abandoned;
};

class ModerationProvider {
 public:
  virtual ~ModerationProvider() = default;
  // Judges `input.text` by `input.deadline`. Blocking; never throws: every failure is an
  // outcome, timed_out when the deadline passed.
  virtual CheckOutcome check(const CheckInput& input) const = 0;
  // "http", "classifier": for error messages.
  virtual std::string_view kind() const = 0;
};

// What to do when a provider gives no verdict (timeout, error, an answer it cannot read).
enum class OnError { fail_open, fail_closed };

std::string_view to_string(OnError on_error);
std::string_view to_string(CheckOutcome::Kind kind);  // verdict, timeout, error

// A check that was started: its outcome once there. Shared by the runner's threads (which
// settle it) and the stage (which polls, waits, or is called back); the first outcome settled
// wins.
class PendingCheck {
 public:
  explicit PendingCheck(CheckClock::time_point deadline) : deadline_(deadline) {}

  // Registers `callback` to run on the thread that settles the check; false (and nothing
  // registered) when the outcome is already there. See ProviderRunner::when_settled.
  bool on_settled(std::function<void()> callback);
  bool ready() const;
  // The outcome, or nullopt while the check runs.
  std::optional<CheckOutcome> poll() const;
  // Waits until the outcome is there or `until` passes; then a timeout outcome (the provider
  // still running is told to stop).
  CheckOutcome wait_until(CheckClock::time_point until);
  // Waits until the check's own deadline (and a little more, for the provider to say so itself).
  CheckOutcome wait() { return wait_until(deadline_ + std::chrono::milliseconds(50)); }

  void settle(CheckOutcome outcome);
  // Nobody wants the outcome any more: the provider stops at its next look.
  void abandon();
  bool abandoned() const;
  CheckClock::time_point deadline() const { return deadline_; }

 private:
  CheckClock::time_point deadline_;
  mutable std::mutex mutex_;
  std::condition_variable settled_;
  std::optional<CheckOutcome> outcome_;
  bool abandoned_ = false;
  std::vector<std::function<void()>> callbacks_;
};

// Runs a provider's checks on `threads` threads of its own. Every check has its outcome by its
// deadline (and a grace of kGrace): a check still queued then, or whose provider overruns it, is
// settled as a timeout by the runner's watch (and the provider told to stop). Destruction
// abandons what is queued, tells the running checks to stop, and waits for them.
//
// At most `max_outstanding` checks are outstanding (started and not yet settled) at once: one
// more is settled at once as a failure ("N checks already wait for it"), which the stage's
// on_error then decides, so a provider that slows down under a flood costs bounded memory
// instead of arrival rate × timeout.
class ProviderRunner {
 public:
  static constexpr size_t kDefaultMaxOutstanding = 1000;
  ProviderRunner(std::shared_ptr<const ModerationProvider> provider, std::string name,
                 size_t threads, size_t max_outstanding = kDefaultMaxOutstanding);
  ~ProviderRunner();
  ProviderRunner(const ProviderRunner&) = delete;
  ProviderRunner& operator=(const ProviderRunner&) = delete;

  // Starts judging `input` (its `abandoned` is set here); returns at once.
  std::shared_ptr<PendingCheck> start(CheckInput input);
  // Runs `callback` once `check` has its outcome, always on one of the runner's threads, never
  // on the caller's (which may hold a lock the callback takes). It must not throw.
  void when_settled(const std::shared_ptr<PendingCheck>& check, std::function<void()> callback);
  static constexpr std::chrono::milliseconds kGrace{50};

  // Checks started and not yet settled.
  size_t outstanding() const { return outstanding_->load(); }

  // The name that error messages and annotations use (the stage's).
  const std::string& name() const { return name_; }
  const ModerationProvider& provider() const { return *provider_; }

 private:
  struct Job {
    CheckInput input;
    std::shared_ptr<PendingCheck> pending;
    std::function<void()> callback;  // instead of a check: a callback to run
  };
  void work();
  void watch();
  // Drops the deadlines of checks settled or gone (the watch only drops them when due), so that
  // they stay about as many as the outstanding checks. Called with mutex_ held.
  void forget_settled_deadlines();

  std::shared_ptr<const ModerationProvider> provider_;
  std::string name_;
  size_t max_outstanding_;
  // Checks started and not settled; counted down by each check as it settles, which may be
  // after the runner is gone.
  std::shared_ptr<std::atomic<size_t>> outstanding_ = std::make_shared<std::atomic<size_t>>(0);
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable watch_wake_;
  std::deque<Job> queue_;
  // Checks not yet settled, by deadline, for the watch.
  std::multimap<CheckClock::time_point, std::weak_ptr<PendingCheck>> deadlines_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  std::thread watch_thread_;
};

// A timeout in milliseconds as words: "500 ms".
std::string milliseconds_text(CheckClock::duration duration);

}  // namespace chatflow::moderation
