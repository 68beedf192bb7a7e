// A sink is where one request's chunks end up: the SSE writer, the CLI printer, a test collector.
#pragma once

namespace chatflow {

class Request;
struct Chunk;

class Sink {
 public:
  virtual ~Sink() = default;

  // Chunks in stream order; never called concurrently for one request.
  virtual void on_chunk(Request& request, const Chunk& chunk) = 0;

  // Exactly once per submitted request, after its last on_chunk. `request.error()` says whether
  // it failed (or was cancelled); otherwise `request.finish_reason()` says how it ended.
  // Runs on a pipeline or engine thread: hand heavy work elsewhere.
  virtual void on_finish(Request& request) = 0;

  // When the last reference to the request is gone: nothing reads or writes it any more. A
  // cancelled request's sink hears on_finish at once, while stages may still be busy with it;
  // whatever reads what stages wrote (usage, annotations, identity) for logs and metrics
  // belongs here. Runs on whichever thread let go last, and must not throw.
  virtual void on_released(const Request& /*request*/) {}
};

}  // namespace chatflow
