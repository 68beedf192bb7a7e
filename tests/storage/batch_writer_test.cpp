#include "framework/storage/batch_writer.h"

#include <atomic>
#include <new>
#include <stdexcept>

#include <gtest/gtest.h>

namespace chatflow::storage {
namespace {

using Writer = BatchWriter<int>;

TEST(BatchWriter, WritesEveryItemInOrderBeforeFlushReturns) {
  std::vector<int> written;  // the writer's thread only, until flush() returns
  Writer writer("test store", [&](Writer::Batch& batch) {
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
  Writer writer("test store", [&](Writer::Batch& batch) {
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
    Writer writer("test store", [&](Writer::Batch& batch) {
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
    Writer writer(
        "test store", [](Writer::Batch&) {},
        [&] {
          if (upkeeps++ == 0) throw std::runtime_error("no server");
        },
        std::chrono::milliseconds(5));
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

}  // namespace
}  // namespace chatflow::storage
