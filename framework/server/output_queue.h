// The bytes a connection has yet to write to its client, held in blocks of at most 64 KiB: the
// memory held is what is queued (no string doubling its capacity as it grows, no copy of the
// whole backlog per write), and what it holds is counted, allocation slack included, so a cap on
// a slow client's backlog bounds real memory.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/buffer.hpp>

namespace chatflow::server {

class OutputQueue {
 public:
  static constexpr size_t kBlockBytes = 64 * 1024;

  void append(std::string_view bytes);
  bool has_queued() const { return !queued_.empty(); }
  // Everything held (queued and in flight), as allocated.
  size_t held_bytes() const { return held_bytes_; }

  // Moves whole blocks (at least one, at most about `max_bytes`) in flight and returns them as
  // buffers, valid until written(). Call only with none in flight.
  std::vector<boost::asio::const_buffer> take(size_t max_bytes);
  // The blocks in flight are written (or their write failed): frees them.
  void written();
  // Frees what is queued (blocks in flight stay until written()).
  void drop_queued();

 private:
  std::deque<std::string> queued_;
  std::deque<std::string> in_flight_;
  size_t held_bytes_ = 0;
};

}  // namespace chatflow::server
