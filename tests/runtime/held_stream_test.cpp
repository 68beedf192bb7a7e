// A stream stage that holds its stream's end (held_stream.h): the final chunk it emits later,
// from another thread, ends the stream after everything before it; the pipeline's threads serve
// other requests meanwhile (the runtime does not end the held stream by itself); a handle let go
// of without ending the stream fails the request instead of leaving it open, also when that
// happens inside process() (a throw after holding), on the thread that runs it.
#include "framework/api/held_stream.h"

#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"
#include "support/test_stages.h"

namespace chatflow::testing {
namespace {

using namespace std::chrono_literals;

// hold_end: passes chunks on; at the final one holds the end and hands the handle to a thread
// that, once the test opens its gate, emits " [held end]" and the final chunk (or, with
// `drop: true`, lets go of the handle without a word). With `in_process: throw` it holds the end
// and then throws from process() (the handle dies as the exception leaves); with `in_process:
// drop` the handle dies at the end of process(), without a word.
struct HoldEndConfig {
  bool drop = false;
  std::string in_process;
};

struct Threads {
  std::mutex mutex;
  std::vector<std::thread> list;
  template <class F>
  void start(F&& body) {
    std::lock_guard lock(mutex);
    list.emplace_back(std::forward<F>(body));
  }
  void join() {
    std::lock_guard lock(mutex);
    for (auto& thread : list)
      thread.join();
  }
};

struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;
  void wait() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard lock(mutex);
      open = true;
    }
    changed.notify_all();
  }
};

class HoldEndStage final : public StreamStage {
 public:
  HoldEndStage(HoldEndConfig config, std::shared_ptr<Gate> gate, Threads* threads)
      : config_(config), gate_(std::move(gate)), threads_(threads) {}
  void process(StreamContext& context, Chunk chunk) override {
    if (!chunk.is_final()) return context.emit(std::move(chunk));
    if (config_.in_process == "throw") {
      HeldStream held = hold_stream(context);
      throw std::runtime_error("failed after holding the end");
    }
    if (config_.in_process == "drop") {
      HeldStream held = hold_stream(context);
      return;
    }
    auto held = std::make_shared<HeldStream>(hold_stream(context));
    auto finish = chunk.finish;
    threads_->start([held, finish, gate = gate_, drop = config_.drop]() mutable {
      gate->wait();
      if (drop) return held.reset();
      held->emit(Chunk::delta(" [held end]"));
      Chunk last;
      last.finish = finish;
      held->emit(std::move(last));
    });
  }

 private:
  HoldEndConfig config_;
  std::shared_ptr<Gate> gate_;
  Threads* threads_;
};

class HeldStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = test_registry();
    StageTypeBuilder<HoldEndConfig> type("hold_end", StageKind::stream, "holds the end");
    type.port("out", PortKind::stream, "the chunks");
    type.config().key("drop", &HoldEndConfig::drop, "let go of the handle");
    type.config().key("in_process", &HoldEndConfig::in_process, "throw or drop in process()");
    auto gate = gate_;
    auto* threads = &threads_;
    type.create([gate, threads](const HoldEndConfig& config, StageContext&) {
      return std::make_unique<HoldEndStage>(config, gate, threads);
    });
    registry_.add(type.build());
  }
  void TearDown() override {
    gate_->release();
    threads_.join();
  }
  std::unique_ptr<Pipeline> pipeline(bool drop, const std::string& in_process = "") {
    return build_yaml(std::string("version: 1\nstages:\n") +
                          "  - {name: gen, type: generate, config: {chunks: 3}}\n" +
                          "  - {name: hold, type: hold_end, config: {drop: " +
                          (drop ? "true" : "false") + ", in_process: '" + in_process + "'}}\n",
                      registry_);
  }

  Registry registry_;
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  Threads threads_;
};

TEST_F(HeldStreamTest, TheHeldEndComesLaterInOrderWhileOtherRequestsGoOn) {
  auto built = pipeline(false);
  ASSERT_TRUE(built);
  std::shared_ptr<CollectingSink> first;
  auto held = user_request("go", first);
  ASSERT_EQ(built->submit(held), Admission::accepted);
  // The runtime leaves the held stream open: no final chunk without the handle.
  EXPECT_FALSE(first->wait(200ms));
  EXPECT_EQ(first->text(), "t0 t1 t2 ");
  // Holding the end holds no pipeline thread: a second request runs through meanwhile (and is
  // held in turn).
  std::shared_ptr<CollectingSink> second;
  auto other = user_request("go", second);
  ASSERT_EQ(built->submit(other), Admission::accepted);
  for (int i = 0; i < 200 && second->text() != "t0 t1 t2 "; ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(second->text(), "t0 t1 t2 ");
  gate_->release();
  ASSERT_TRUE(first->wait());
  ASSERT_TRUE(second->wait());
  EXPECT_EQ(first->text(), "t0 t1 t2  [held end]");
  EXPECT_TRUE(first->chunks().back().is_final());
  EXPECT_FALSE(held->error());
  EXPECT_EQ(held->finish_reason(), first->chunks().back().finish) << "the generator's own";
  EXPECT_EQ(first->finish_calls(), 1);
  built->drain();
}

TEST_F(HeldStreamTest, AHandleLetGoOfFailsTheRequest) {
  auto built = pipeline(true);
  ASSERT_TRUE(built);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("go", sink);
  ASSERT_EQ(built->submit(request), Admission::accepted);
  gate_->release();
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->code, "abandoned");
  EXPECT_EQ(sink->text(), "t0 t1 t2 ");
  built->drain();
}

// The handle dies inside process(), on the pipeline thread that holds the stream's lock: the
// request ends with the stage's error (once process() returned), and the thread goes on.
TEST_F(HeldStreamTest, AStageThatThrowsAfterHoldingTheEndFailsTheRequestWithItsError) {
  auto built = pipeline(false, "throw");
  ASSERT_TRUE(built);
  for (int i = 0; i < 2; ++i) {  // the second shows the pipeline thread was not lost
    std::shared_ptr<CollectingSink> sink;
    auto request = user_request("go", sink);
    ASSERT_EQ(built->submit(request), Admission::accepted);
    ASSERT_TRUE(sink->wait(10s)) << "request " << i << " never finished";
    ASSERT_TRUE(request->error());
    EXPECT_EQ(request->error()->status, 500);
    EXPECT_EQ(request->error()->message,
              "stage 'hold' (hold_end) failed: failed after holding the end");
    EXPECT_EQ(sink->text(), "t0 t1 t2 ");
    EXPECT_EQ(sink->finish_calls(), 1);
  }
  built->drain();
}

TEST_F(HeldStreamTest, AHandleLetGoOfInsideProcessFailsTheRequest) {
  auto built = pipeline(false, "drop");
  ASSERT_TRUE(built);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("go", sink);
  ASSERT_EQ(built->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait(10s));
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->code, "abandoned");
  EXPECT_EQ(sink->text(), "t0 t1 t2 ");
  for (const Chunk& chunk : sink->chunks())
    EXPECT_FALSE(chunk.is_final()) << "the stream ended as if the stage had finished it";
  built->drain();
}

}  // namespace
}  // namespace chatflow::testing
