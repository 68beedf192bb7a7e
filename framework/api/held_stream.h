// Ending a stream stage's output later, from another thread. A stream stage that must wait for
// something before its output can end (output moderation waiting for a provider's verdict on
// the whole answer) would otherwise block a pipeline thread in process() while it waits, and
// with it every other request that thread serves. Instead, while it processes the stream's last
// chunk, it takes the stream's end with hold_stream() and returns; the runtime then leaves the
// end to the handle, through which the stage emits the rest (its final chunk last), in order,
// from any thread.
#pragma once

#include <memory>

#include "framework/api/stage.h"

namespace chatflow {

namespace detail {
class FlowNode;
struct StreamSlot;
struct StageIoAccess;
}  // namespace detail

class HeldStream {
 public:
  HeldStream() = default;
  HeldStream(const HeldStream&) = delete;
  HeldStream& operator=(const HeldStream&) = delete;
  HeldStream(HeldStream&& other) noexcept;
  HeldStream& operator=(HeldStream&& other) noexcept;
  // A handle let go of before it ended the stream fails the request (500 "abandoned"), which
  // would otherwise stay open forever; let go of inside process() (an exception thrown after
  // hold_stream()), the request fails once process() is over, with that exception's error.
  ~HeldStream();

  // Passes a chunk on, as StreamContext::emit does; a chunk with `finish` ends the stream and
  // the hold. From any thread, inside this stage's process() too.
  void emit(Chunk chunk);
  // Fails the request after the chunks emitted before.
  void fail(RequestError error);
  explicit operator bool() const { return request_ != nullptr; }

 private:
  friend struct detail::StageIoAccess;
  void release();
  std::shared_ptr<Request> request_;
  detail::FlowNode* node_ = nullptr;
  detail::StreamSlot* slot_ = nullptr;
};

// Only while processing the stream's last chunk (the one with `finish` set), and only once.
HeldStream hold_stream(StreamContext& context);

}  // namespace chatflow
