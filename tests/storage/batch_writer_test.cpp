#include "framework/storage/batch_writer.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace chatflow::storage {
namespace {

using Writer = BatchWriter<int>;

TEST(BatchWriter, WritesEveryItemInOrderBeforeFlushReturns) {
  std::vector<int> written;  // the writer's thread only, until flush() returns
  Writer writer("test store", [&](const Writer::Batch& batch) {
    written.insert(written.end(), batch.begin(), batch.end());
  });
  for (int i = 0; i < 100; ++i)
    writer.push(i);
  writer.flush();
  ASSERT_EQ(written.size(), 100u);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(written[i], i);
  EXPECT_EQ(writer.lost(), 0);
  EXPECT_EQ(writer.last_failure_time(), 0);
}

// Whatever a write throws, the batch is counted lost and the writer goes on with the next one.
// Which failure is chosen by the batch's items, not by call: the writer may take 2 and 3 as one
// batch or as two.
TEST(BatchWriter, AFailedBatchOfAnyKindIsCountedAndTheNextIsWritten) {
  std::vector<int> written;
  Writer writer("test store", [&](const Writer::Batch& batch) {
    for (int item : batch) {
      if (item == 1) throw std::bad_alloc();
      if (item == 2) throw 42;  // not even a std::exception
      if (item == 3) throw std::runtime_error("disk full");
    }
    written.insert(written.end(), batch.begin(), batch.end());
  });
  testing::internal::CaptureStderr();
  writer.push(1);
  writer.flush();
  writer.push(2);
  writer.flush();
  writer.push(3);
  writer.push(30);  // with 3, or alone and written
  writer.flush();
  std::string messages = testing::internal::GetCapturedStderr();
  EXPECT_GE(writer.lost(), 3);
  EXPECT_LE(writer.lost(), 4);
  EXPECT_GT(writer.last_failure_time(), 0);
  EXPECT_NE(messages.find("chatflow: test store: std::bad_alloc (1 rows lost)"), std::string::npos)
      << messages;
  EXPECT_NE(messages.find("chatflow: test store: an unknown failure (1 rows lost)"),
            std::string::npos)
      << messages;
  EXPECT_NE(messages.find("chatflow: test store: disk full ("), std::string::npos) << messages;
  int64_t lost = writer.lost();
  writer.push(5);
  writer.flush();
  EXPECT_EQ(written.back(), 5);
  EXPECT_EQ(writer.lost(), lost);
}

TEST(BatchWriter, StoppingWritesWhatIsQueued) {
  std::vector<int> written;
  {
    Writer writer("test store", [&](const Writer::Batch& batch) {
      written.insert(written.end(), batch.begin(), batch.end());
    });
    for (int i = 0; i < 10; ++i)
      writer.push(i);
  }
  EXPECT_EQ(written.size(), 10u);
}

TEST(BatchWriter, UpkeepRunsAtStartAndAgainWhileIdleAndItsFailuresAreOnlyLogged) {
  std::atomic<int> upkeeps{0};
  testing::internal::CaptureStderr();
  {
    BatchWriterOptions options;
    options.upkeep = [&] {
      if (upkeeps++ == 0) throw std::runtime_error("no server");
    };
    options.upkeep_interval = std::chrono::milliseconds(5);
    Writer writer(
        "test store", [](const Writer::Batch&) {}, options);
    for (int spins = 0; upkeeps < 3 && spins < 2000; ++spins)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    writer.push(1);
    writer.flush();
    EXPECT_EQ(writer.lost(), 0);
  }
  std::string messages = testing::internal::GetCapturedStderr();
  EXPECT_GE(upkeeps.load(), 3);
  EXPECT_NE(messages.find("chatflow: test store: no server\n"), std::string::npos) << messages;
}

// A store that can be taken down: while down, every write throws Unreachable, which the writer
// is told is transient.
struct Unreachable : std::runtime_error {
  Unreachable() : std::runtime_error("connection refused") {}
};

class FlakyStore {
 public:
  void write(const Writer::Batch& batch) {
    ++attempts;
    if (down) throw Unreachable();
    std::lock_guard lock(mutex);
    written.insert(written.end(), batch.begin(), batch.end());
  }
  std::vector<int> items() {
    std::lock_guard lock(mutex);
    return written;
  }
  std::atomic<bool> down{false};
  std::atomic<int> attempts{0};

 private:
  std::mutex mutex;
  std::vector<int> written;
};

BatchWriterOptions retrying(size_t max_buffered = 1000) {
  BatchWriterOptions options;
  options.max_buffered = max_buffered;
  options.max_batch = 4;
  options.is_transient = [](const std::exception& error) {
    return dynamic_cast<const Unreachable*>(&error) != nullptr;
  };
  options.first_backoff = std::chrono::milliseconds(1);
  options.max_backoff = std::chrono::milliseconds(5);
  options.stop_grace = std::chrono::milliseconds(50);
  return options;
}

void wait_until(const std::function<bool()>& done) {
  for (int spins = 0; !done() && spins < 4000; ++spins)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(done());
}

TEST(BatchWriter, WhileTheStoreIsUnreachableItemsWaitAndAreWrittenInOrderWhenItIsBack) {
  FlakyStore store;
  Writer writer(
      "test store", [&](const Writer::Batch& batch) { store.write(batch); }, retrying());
  writer.push(0);
  ASSERT_TRUE(writer.flush());
  store.down = true;
  testing::internal::CaptureStderr();
  for (int i = 1; i <= 20; ++i)
    writer.push(i);
  wait_until([&] { return store.attempts > 5; });
  EXPECT_FALSE(writer.flush()) << "flush waits for a store that is down";
  EXPECT_EQ(writer.buffered(), 20u);
  EXPECT_GT(writer.last_failure_time(), 0);
  EXPECT_EQ(writer.lost(), 0);
  store.down = false;
  wait_until([&] { return writer.buffered() == 0; });
  EXPECT_TRUE(writer.flush());
  std::string messages = testing::internal::GetCapturedStderr();
  std::vector<int> expected;
  for (int i = 0; i <= 20; ++i)
    expected.push_back(i);
  EXPECT_EQ(store.items(), expected);
  EXPECT_EQ(writer.lost(), 0);
  EXPECT_NE(messages.find("chatflow: test store: connection refused; "), std::string::npos)
      << messages;
  EXPECT_NE(messages.find("chatflow: test store: works again"), std::string::npos) << messages;
}

TEST(BatchWriter, PastTheBufferNewItemsAreDroppedCountedAndLogged) {
  FlakyStore store;
  store.down = true;
  testing::internal::CaptureStderr();
  Writer writer(
      "test store", [&](const Writer::Batch& batch) { store.write(batch); },
      retrying(/*max_buffered=*/5));
  int accepted = 0;
  for (int i = 0; i < 8; ++i)
    accepted += writer.push(i) ? 1 : 0;
  EXPECT_EQ(accepted, 5);
  EXPECT_EQ(writer.lost(), 3);
  store.down = false;
  wait_until([&] { return writer.buffered() == 0; });
  std::string messages = testing::internal::GetCapturedStderr();
  EXPECT_EQ(store.items(), (std::vector<int>{0, 1, 2, 3, 4})) << "the first five waited";
  EXPECT_EQ(writer.lost(), 3);
  EXPECT_NE(messages.find("5 rows already wait to be written; new rows are dropped and counted "
                          "lost"),
            std::string::npos)
      << messages;
}

TEST(BatchWriter, AtStopAStoreStillUnreachableCostsWhatWaitsAfterTheGrace) {
  FlakyStore store;
  store.down = true;
  testing::internal::CaptureStderr();
  {
    Writer writer(
        "test store", [&](const Writer::Batch& batch) { store.write(batch); }, retrying());
    for (int i = 0; i < 10; ++i)
      writer.push(i);
    wait_until([&] { return store.attempts > 0; });
  }  // stops: tried for 50 ms more, then given up
  std::string messages = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(store.items().empty());
  EXPECT_NE(messages.find("still failing after 50 ms of stopping (10 rows lost)"),
            std::string::npos)
      << messages;
}

TEST(BatchWriter, DiscardedQueuedItemsAreNeitherWrittenNorLost) {
  FlakyStore store;
  store.down = true;
  Writer writer(
      "test store", [&](const Writer::Batch& batch) { store.write(batch); }, retrying());
  for (int i = 0; i < 12; ++i)
    writer.push(i);
  wait_until([&] { return store.attempts > 0; });
  EXPECT_TRUE(writer.any_pending([](int item) { return item == 11; }));
  size_t discarded = writer.discard_queued([](int item) { return item % 2 == 1; });
  EXPECT_GE(discarded, 4u) << "the odd ones outside the batch being written";
  EXPECT_FALSE(writer.any_pending([](int item) { return item == 11; }));
  store.down = false;
  wait_until([&] { return writer.buffered() == 0; });
  EXPECT_EQ(writer.lost(), 0);
  for (int item : store.items()) {
    if (item >= 4) {
      EXPECT_EQ(item % 2, 0) << "a discarded item was written";
    }
  }
}

// A caller that must not overtake a batch waiting for the store asks for it to be tried at
// once instead of after its wait (an hour here), and learns how that try went.
TEST(BatchWriter, FlushTryingNowTriesAWaitingBatchAtOnce) {
  FlakyStore store;
  store.down = true;
  BatchWriterOptions options = retrying();
  options.first_backoff = std::chrono::hours(1);
  options.max_backoff = std::chrono::hours(1);
  testing::internal::CaptureStderr();
  Writer writer(
      "test store", [&](const Writer::Batch& batch) { store.write(batch); }, options);
  writer.push(1);
  wait_until([&] { return store.attempts == 1; });
  EXPECT_FALSE(writer.flush());
  EXPECT_EQ(store.attempts, 1) << "flush() does not ask for a try";
  EXPECT_FALSE(writer.flush_trying_now()) << "the store is still down";
  EXPECT_EQ(store.attempts, 2);
  store.down = false;
  EXPECT_TRUE(writer.flush_trying_now());
  EXPECT_EQ(store.items(), std::vector<int>{1});
  testing::internal::GetCapturedStderr();
}

// Opened once by one thread; waited for by another.
class Latch {
 public:
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    opened_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

// The writer is kept busy in its upkeep while an item is pushed, a flush starts waiting for it,
// and the item is discarded before the writer ever takes it: the writer then finds an empty
// queue and writes nothing, so only the discard can tell the flush that nothing is left.
TEST(BatchWriter, AFlushWaitingForAnItemThatIsDiscardedReturns) {
  Latch upkeep_running;
  Latch upkeep_may_end;
  BatchWriterOptions options;
  options.upkeep = [&] {
    upkeep_running.open();
    upkeep_may_end.wait();
  };
  options.upkeep_interval = std::chrono::hours(1);  // once, at start
  std::vector<int> written;                         // the writer's thread only
  Writer writer(
      "test store",
      [&](const Writer::Batch& batch) {
        written.insert(written.end(), batch.begin(), batch.end());
      },
      options);
  upkeep_running.wait();
  writer.push(1);
  auto flushed = std::async(std::launch::async, [&] { return writer.flush(); });
  wait_until([&] { return writer.waiting_flushes() == 1; });
  EXPECT_EQ(writer.discard_queued([](int item) { return item == 1; }), 1u);
  upkeep_may_end.open();
  bool returned = flushed.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "flush() still waits for an item that was discarded";
  if (!returned) {
    writer.push(2);  // a later batch's end wakes it
    flushed.wait();
  }
  EXPECT_TRUE(flushed.get());
  EXPECT_EQ(writer.lost(), 0);
}

}  // namespace
}  // namespace chatflow::storage
