// ModelRouter: models loaded on first use, one load shared by every request that waits for it,
// waiters bounded in number and time, the least recently used idle model unloaded beyond
// models_max or models_memory_mib (never one a request holds), a failed load reported and
// tried again. The loader is the test's: it hands out empty ServedPipelines and may be held.
#include "framework/server/model_router.h"

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

namespace chatflow::server {
namespace {

using namespace std::chrono_literals;

struct Outcome {
  std::shared_ptr<const ServedPipeline> served;
  std::optional<RequestError> error;
};

// Holds loads until released; counts them per model.
class TestLoader {
 public:
  ModelRouter::Loader loader() {
    return [this](const ModelEntry& entry) {
      std::unique_lock lock(mutex_);
      ++loads_[entry.name];
      changed_.notify_all();
      changed_.wait(lock, [&] { return !held_; });
      if (fail_next_) {
        fail_next_ = false;
        throw std::runtime_error("the file is not a GGUF model");
      }
      return ModelRouter::Loaded{std::make_shared<ServedPipeline>(), memory_bytes_};
    };
  }
  void hold() {
    std::lock_guard lock(mutex_);
    held_ = true;
  }
  void release() {
    std::lock_guard lock(mutex_);
    held_ = false;
    changed_.notify_all();
  }
  void fail_next() { fail_next_ = true; }
  void set_memory(int64_t bytes) { memory_bytes_ = bytes; }
  int loads(const std::string& name) {
    std::lock_guard lock(mutex_);
    return loads_[name];
  }
  void wait_for_load(const std::string& name, int count) {
    std::unique_lock lock(mutex_);
    ASSERT_TRUE(changed_.wait_for(lock, 10s, [&] { return loads_[name] >= count; }));
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = false;
  bool fail_next_ = false;
  int64_t memory_bytes_ = 0;
  std::map<std::string, int> loads_;
};

ModelEntry entry(std::string name, std::vector<std::string> aliases = {}) {
  ModelEntry entry;
  entry.name = std::move(name);
  entry.aliases = std::move(aliases);
  return entry;
}

ModelsSettings three_models() {
  ModelsSettings settings;
  settings.entries = {entry("small", {"gpt-4o-mini"}), entry("large"),
                      entry("coder", {"code", "qwen-coder"})};
  return settings;
}

// acquire() with its answer as a future.
std::future<Outcome> acquire(ModelRouter& router, const std::string& name) {
  auto promise = std::make_shared<std::promise<Outcome>>();
  auto future = promise->get_future();
  router.acquire(name, [promise](std::shared_ptr<const ServedPipeline> served,
                                 std::optional<RequestError> error) {
    promise->set_value({std::move(served), std::move(error)});
  });
  return future;
}

Outcome get(std::future<Outcome>& future) {
  EXPECT_EQ(future.wait_for(10s), std::future_status::ready) << "no answer in 10 s";
  return future.get();
}

ModelState state_of(const ModelRouter& router, const std::string& name) {
  for (const auto& status : router.statuses())
    if (status.name == name) return status.state;
  ADD_FAILURE() << "no model " << name;
  return ModelState::unloaded;
}

TEST(ModelRouter, FindsEntriesByNameAndAliasAndListsEveryName) {
  TestLoader loads;
  ModelRouter router(three_models(), loads.loader());
  EXPECT_EQ(router.find("qwen-coder")->name, "coder");
  EXPECT_EQ(router.find("gpt-4o-mini")->name, "small");
  EXPECT_EQ(router.find("gpt-4"), nullptr);
  EXPECT_EQ(router.names(), (std::vector<std::string>{"small", "gpt-4o-mini", "large", "coder",
                                                      "code", "qwen-coder"}));
}

TEST(ModelRouter, LoadsOnFirstUseThenAnswersAtOnce) {
  TestLoader loads;
  ModelRouter router(three_models(), loads.loader());
  EXPECT_EQ(state_of(router, "small"), ModelState::unloaded);
  auto first = acquire(router, "gpt-4o-mini");
  Outcome outcome = get(first);
  ASSERT_FALSE(outcome.error) << outcome.error->message;
  ASSERT_TRUE(outcome.served);
  EXPECT_EQ(state_of(router, "small"), ModelState::loaded);
  // Loaded: answered before acquire returns, with the same pipeline, without another load.
  auto again = acquire(router, "small");
  ASSERT_EQ(again.wait_for(0s), std::future_status::ready);
  EXPECT_EQ(again.get().served, outcome.served);
  EXPECT_EQ(loads.loads("small"), 1);
  EXPECT_EQ(loads.loads("large"), 0);
}

TEST(ModelRouter, RequestsArrivingDuringALoadShareIt) {
  TestLoader loads;
  ModelRouter router(three_models(), loads.loader());
  loads.hold();
  std::vector<std::future<Outcome>> waiting;
  for (int i = 0; i < 5; ++i)
    waiting.push_back(acquire(router, i % 2 ? "code" : "coder"));
  loads.wait_for_load("coder", 1);
  EXPECT_EQ(state_of(router, "coder"), ModelState::loading);
  EXPECT_EQ(waiting[0].wait_for(50ms), std::future_status::timeout);
  loads.release();
  std::shared_ptr<const ServedPipeline> served;
  for (auto& future : waiting) {
    Outcome outcome = get(future);
    ASSERT_TRUE(outcome.served);
    if (!served) served = outcome.served;
    EXPECT_EQ(outcome.served, served);
  }
  EXPECT_EQ(loads.loads("coder"), 1);
}

TEST(ModelRouter, WaitersBeyondTheLimitAreRefusedAtOnce) {
  TestLoader loads;
  ModelsSettings settings = three_models();
  settings.max_waiters = 2;
  ModelRouter router(settings, loads.loader());
  loads.hold();
  auto first = acquire(router, "large");
  auto second = acquire(router, "large");
  auto third = acquire(router, "large");
  ASSERT_EQ(third.wait_for(0s), std::future_status::ready);
  Outcome refused = third.get();
  ASSERT_TRUE(refused.error);
  EXPECT_EQ(refused.error->status, 503);
  EXPECT_EQ(refused.error->code, "too_many_waiting");
  EXPECT_NE(refused.error->message.find("'large'"), std::string::npos);
  loads.release();
  EXPECT_TRUE(get(first).served);
  EXPECT_TRUE(get(second).served);
}

TEST(ModelRouter, AWaiterGivesUpAfterTheLoadTimeoutAndTheLoadStillCompletes) {
  TestLoader loads;
  ModelsSettings settings = three_models();
  settings.load_timeout_s = 0.2;
  ModelRouter router(settings, loads.loader());
  loads.hold();
  auto waiting = acquire(router, "small");
  Outcome timed_out = get(waiting);
  ASSERT_TRUE(timed_out.error);
  EXPECT_EQ(timed_out.error->status, 503);
  EXPECT_EQ(timed_out.error->code, "model_load_timeout");
  EXPECT_EQ(state_of(router, "small"), ModelState::loading);
  loads.release();
  auto later = acquire(router, "small");
  EXPECT_TRUE(get(later).served);
  EXPECT_EQ(loads.loads("small"), 1);
}

TEST(ModelRouter, BeyondModelsMaxTheLeastRecentlyUsedIdleModelIsUnloaded) {
  TestLoader loads;
  ModelsSettings settings = three_models();
  settings.max_loaded = 2;
  ModelRouter router(settings, loads.loader());
  std::weak_ptr<const ServedPipeline> small;
  {
    auto a = acquire(router, "small");
    small = get(a).served;
    auto b = acquire(router, "large");
    get(b);
    auto again = acquire(router, "small");  // now large is the least recently used
    get(again);
  }
  auto c = acquire(router, "coder");
  ASSERT_TRUE(get(c).served);
  EXPECT_EQ(state_of(router, "small"), ModelState::loaded);
  EXPECT_EQ(state_of(router, "large"), ModelState::unloaded);
  EXPECT_EQ(state_of(router, "coder"), ModelState::loaded);
  EXPECT_FALSE(small.expired());
  // Used again, large loads again and small (now the oldest) makes room.
  auto d = acquire(router, "large");
  ASSERT_TRUE(get(d).served);
  EXPECT_EQ(loads.loads("large"), 2);
  EXPECT_EQ(state_of(router, "small"), ModelState::unloaded);
  EXPECT_TRUE(small.expired()) << "an unloaded model's pipeline must be let go of";
}

TEST(ModelRouter, AModelARequestHoldsIsNotUnloadedTheLoadWaitsForIt) {
  TestLoader loads;
  ModelsSettings settings = three_models();
  settings.max_loaded = 1;
  ModelRouter router(settings, loads.loader());
  auto a = acquire(router, "small");
  std::shared_ptr<const ServedPipeline> in_use = get(a).served;  // a request running in it
  auto b = acquire(router, "large");
  EXPECT_EQ(b.wait_for(300ms), std::future_status::timeout);
  EXPECT_EQ(state_of(router, "small"), ModelState::loaded);
  EXPECT_EQ(loads.loads("large"), 0);
  in_use.reset();  // the request is over
  ASSERT_TRUE(get(b).served);
  EXPECT_EQ(state_of(router, "small"), ModelState::unloaded);
  EXPECT_EQ(state_of(router, "large"), ModelState::loaded);
}

TEST(ModelRouter, NoRoomWithinTheTimeoutIsA503AndNoFailure) {
  TestLoader loads;
  ModelsSettings settings = three_models();
  settings.max_loaded = 1;
  settings.load_timeout_s = 0.3;
  ModelRouter router(settings, loads.loader());
  auto a = acquire(router, "small");
  auto in_use = get(a).served;
  auto b = acquire(router, "large");
  Outcome outcome = get(b);
  ASSERT_TRUE(outcome.error);
  EXPECT_EQ(outcome.error->status, 503);
  // The waiter's own timeout or the load's give-up, whichever came first: never a failed model.
  EXPECT_NE(state_of(router, "large"), ModelState::failed);
  EXPECT_EQ(loads.loads("large"), 0);
}

TEST(ModelRouter, AMemoryBudgetUnloadsTheOldestToMakeRoom) {
  TestLoader loads;
  ModelsSettings settings = three_models();
  settings.memory_budget_mib = 5;
  loads.set_memory(int64_t{2} << 20);
  ModelRouter router(settings, loads.loader());
  for (const char* name : {"small", "large"}) {
    auto future = acquire(router, name);
    ASSERT_TRUE(get(future).served);
  }
  EXPECT_EQ(state_of(router, "small"), ModelState::loaded);
  EXPECT_EQ(state_of(router, "large"), ModelState::loaded);
  // A first load's size is unknown until it is loaded: coder loads, then the oldest (small)
  // goes to bring the total under 5 MiB; small, known now, makes room before it loads again.
  auto c = acquire(router, "coder");
  ASSERT_TRUE(get(c).served);
  auto again = acquire(router, "small");
  ASSERT_TRUE(get(again).served);
  int loaded = 0;
  int64_t memory = 0;
  for (const auto& status : router.statuses()) {
    if (status.state != ModelState::loaded) continue;
    ++loaded;
    memory += status.memory_bytes;
  }
  EXPECT_LE(memory, int64_t{5} << 20);
  EXPECT_EQ(loaded, 2);
}

TEST(ModelRouter, AFailedLoadIsReportedWithItsReasonAndTriedAgainByTheNextRequest) {
  TestLoader loads;
  ModelRouter router(three_models(), loads.loader());
  loads.fail_next();
  auto first = acquire(router, "large");
  Outcome failed = get(first);
  ASSERT_TRUE(failed.error);
  EXPECT_EQ(failed.error->status, 503);
  EXPECT_EQ(failed.error->code, "model_load_failed");
  EXPECT_NE(failed.error->message.find("not a GGUF model"), std::string::npos);
  auto statuses = router.statuses();
  EXPECT_EQ(statuses[1].state, ModelState::failed);
  EXPECT_EQ(statuses[1].failure, "the file is not a GGUF model");
  // The others are untouched, and the next request tries again.
  auto other = acquire(router, "small");
  EXPECT_TRUE(get(other).served);
  auto retry = acquire(router, "large");
  EXPECT_TRUE(get(retry).served);
  EXPECT_EQ(loads.loads("large"), 2);
  EXPECT_EQ(state_of(router, "large"), ModelState::loaded);
}

TEST(ModelRouter, StoppingAnswersEveryWaiter) {
  TestLoader loads;
  ModelRouter router(three_models(), loads.loader());
  loads.hold();
  auto waiting = acquire(router, "small");
  loads.wait_for_load("small", 1);
  router.stop_waiting();
  Outcome outcome = get(waiting);
  ASSERT_TRUE(outcome.error);
  EXPECT_EQ(outcome.error->status, 503);
  auto after = acquire(router, "large");
  EXPECT_TRUE(get(after).error);
  loads.release();
}

TEST(ModelRouter, AModelIdlePastItsTtlIsUnloadedButNotWhileARequestHoldsIt) {
  TestLoader loads;
  ModelsSettings settings = three_models();
  settings.entries[0].ttl_s = 0.2;  // small
  ModelRouter router(settings, loads.loader());
  auto a = acquire(router, "small");
  std::shared_ptr<const ServedPipeline> in_use = get(a).served;
  auto b = acquire(router, "large");  // no ttl_s: stays
  get(b);
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(state_of(router, "small"), ModelState::loaded) << "a request holds it";
  std::weak_ptr<const ServedPipeline> small = in_use;
  in_use.reset();
  for (int i = 0; i < 300 && state_of(router, "small") == ModelState::loaded; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(state_of(router, "small"), ModelState::unloaded);
  EXPECT_EQ(state_of(router, "large"), ModelState::loaded);
  for (int i = 0; i < 100 && !small.expired(); ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(small.expired());
  // Asked again, it loads again.
  auto again = acquire(router, "small");
  EXPECT_TRUE(get(again).served);
  EXPECT_EQ(loads.loads("small"), 2);
}

TEST(ModelRouter, UnloadAllLetsGoOfEveryModel) {
  TestLoader loads;
  ModelRouter router(three_models(), loads.loader());
  auto a = acquire(router, "small");
  std::weak_ptr<const ServedPipeline> small = get(a).served;
  router.unload_all();
  EXPECT_EQ(state_of(router, "small"), ModelState::unloaded);
  // The load's thread may still be returning from handing it over.
  for (int i = 0; i < 100 && !small.expired(); ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(small.expired());
}

}  // namespace
}  // namespace chatflow::server
