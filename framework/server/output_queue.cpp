#include "framework/server/output_queue.h"

#include <algorithm>

namespace chatflow::server {

void OutputQueue::append(std::string_view bytes) {
  if (bytes.empty()) return;
  if (!queued_.empty() && queued_.back().size() + bytes.size() <= kBlockBytes) {
    std::string& block = queued_.back();
    size_t before = block.capacity();
    if (block.size() + bytes.size() > before) {
      // Grow by doubling, but never past a block, so capacity stays within 2x of the bytes
      // held for a small block and exact for a full one.
      block.reserve(std::min(kBlockBytes, std::max(2 * before, block.size() + bytes.size())));
    }
    block.append(bytes);
    held_bytes_ += block.capacity() - before;
    return;
  }
  std::string block;
  block.reserve(bytes.size() >= kBlockBytes ? bytes.size() : std::max<size_t>(bytes.size(), 512));
  block.append(bytes);
  held_bytes_ += block.capacity();
  queued_.push_back(std::move(block));
}

std::vector<boost::asio::const_buffer> OutputQueue::take(size_t max_bytes) {
  std::vector<boost::asio::const_buffer> buffers;
  size_t taken = 0;
  while (!queued_.empty() && (buffers.empty() || taken + queued_.front().size() <= max_bytes)) {
    taken += queued_.front().size();
    in_flight_.push_back(std::move(queued_.front()));
    queued_.pop_front();
    buffers.emplace_back(in_flight_.back().data(), in_flight_.back().size());
  }
  return buffers;
}

void OutputQueue::written() {
  for (const auto& block : in_flight_)
    held_bytes_ -= block.capacity();
  in_flight_.clear();
}

void OutputQueue::drop_queued() {
  for (const auto& block : queued_)
    held_bytes_ -= block.capacity();
  queued_.clear();
}

}  // namespace chatflow::server
