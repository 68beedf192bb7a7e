// What a connection holds for a slow client is counted as allocated, and let go once written.
#include "framework/server/output_queue.h"

#include <string>

#include <gtest/gtest.h>

namespace chatflow::server {
namespace {

std::string joined(const std::vector<boost::asio::const_buffer>& buffers) {
  std::string bytes;
  for (const auto& buffer : buffers)
    bytes.append(static_cast<const char*>(buffer.data()), buffer.size());
  return bytes;
}

TEST(OutputQueue, SmallPiecesShareBlocksAndComeOutInOrder) {
  OutputQueue queue;
  std::string expected;
  for (int i = 0; i < 5000; ++i) {
    std::string piece = "data: event " + std::to_string(i) + "\n\n";
    queue.append(piece);
    expected += piece;
  }
  std::string written;
  while (queue.has_queued()) {
    written += joined(queue.take(1 << 20));
    queue.written();
  }
  EXPECT_EQ(written, expected);
  EXPECT_EQ(queue.held_bytes(), 0u);
}

TEST(OutputQueue, HeldBytesCountAllocationsAndStayNearWhatIsQueued) {
  OutputQueue queue;
  size_t queued = 0;
  // Many small events, as a stream sends them: the blocks they fill hold little slack.
  for (int i = 0; i < 100000; ++i) {
    std::string event(180, 'e');
    queue.append(event);
    queued += event.size();
  }
  EXPECT_GE(queue.held_bytes(), queued);
  EXPECT_LE(queue.held_bytes(), queued + OutputQueue::kBlockBytes);
}

TEST(OutputQueue, BytesInFlightStayCountedUntilWritten) {
  OutputQueue queue;
  queue.append(std::string(3 * OutputQueue::kBlockBytes, 'x'));
  queue.append(std::string(10, 'y'));
  size_t held = queue.held_bytes();
  auto buffers = queue.take(1);  // at least one block, even past the size asked
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].size(), 3 * OutputQueue::kBlockBytes);
  EXPECT_EQ(queue.held_bytes(), held);  // still ours while the write runs
  queue.drop_queued();                  // a slow client's queue goes; the write in flight stays
  EXPECT_GE(queue.held_bytes(), 3 * OutputQueue::kBlockBytes);
  EXPECT_FALSE(queue.has_queued());
  queue.written();
  EXPECT_EQ(queue.held_bytes(), 0u);
}

TEST(OutputQueue, ATakeStopsAtWholeBlocksNearTheSizeAsked) {
  OutputQueue queue;
  for (int i = 0; i < 4; ++i)
    queue.append(std::string(OutputQueue::kBlockBytes, static_cast<char>('a' + i)));
  auto first = queue.take(2 * OutputQueue::kBlockBytes);
  EXPECT_EQ(first.size(), 2u);
  EXPECT_EQ(joined(first).back(), 'b');
  queue.written();
  auto rest = queue.take(1 << 20);
  EXPECT_EQ(joined(rest), std::string(OutputQueue::kBlockBytes, 'c') +
                              std::string(OutputQueue::kBlockBytes, 'd'));
}

}  // namespace
}  // namespace chatflow::server
