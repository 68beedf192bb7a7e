// The stage API: what a stage type implements, and what it may do with a request.
//
// A request stage runs once per request and decides where the request goes next (a request
// port), or starts the response stream (a stream port), or fails the request by throwing
// RequestFailure. A stream stage sees every chunk of one request in order and may rewrite, hold
// back or end the stream. Stage objects are shared by all requests in flight: per-request data
// lives on the Request, or for stream stages in StreamContext::state().
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "framework/api/chunk.h"
#include "framework/api/request.h"

namespace chatflow {

namespace detail {
class PipelineCore;
struct StageIoAccess;
}  // namespace detail

// A port of a stage, as declared by its type: 0 is the first declared port.
using PortId = size_t;

class Stage {
 public:
  virtual ~Stage() = default;
};

// Where a request stage sends the request.
class Route {
 public:
  // Pass the request on through request port `port`.
  static Route to(PortId port) { return Route(Kind::port, port); }
  // The response is (or will be) written through a ChunkWriter from StageIo::open_stream.
  static Route streaming() { return Route(Kind::streaming, 0); }
  // Someone else (an engine thread) continues the request later through a Continuation.
  static Route deferred() { return Route(Kind::deferred, 0); }

  enum class Kind { port, streaming, deferred };
  Kind kind() const { return kind_; }
  PortId port() const { return port_; }

 private:
  Route(Kind kind, PortId port) : kind_(kind), port_(port) {}
  Kind kind_;
  PortId port_;
};

// Writes the response chunks of one request into a stream port; usable from any thread, e.g. an
// engine thread long after the stage returned. Chunks keep the order in which write() is called.
// Writing a chunk with `finish` set ends the stream; later writes are ignored. Copies share the
// same stream. The pipeline waits for every writer to be destroyed before it is torn down.
class ChunkWriter {
 public:
  ChunkWriter() = default;
  ChunkWriter(const ChunkWriter& other);
  ChunkWriter& operator=(const ChunkWriter& other);
  ChunkWriter(ChunkWriter&& other) noexcept;
  ChunkWriter& operator=(ChunkWriter&& other) noexcept;
  ~ChunkWriter();

  void write(Chunk chunk);
  void finish(FinishReason reason) {
    Chunk last;
    last.finish = reason;
    write(std::move(last));
  }
  // Fails the request (e.g. the engine hit an error mid-stream), after the chunks already written.
  void fail(RequestError error);

  Request& request() const { return *request_; }
  const std::shared_ptr<Request>& request_ptr() const { return request_; }
  // True once nobody wants more chunks: the request was cancelled, finished, or a stream stage
  // ended the stream (e.g. moderation stopped it). Producers check this to stop early.
  bool stopped() const;
  explicit operator bool() const { return request_ != nullptr; }

 private:
  friend struct detail::StageIoAccess;
  std::shared_ptr<Request> request_;
  detail::PipelineCore* core_ = nullptr;
  size_t stage_index_ = 0;
  PortId port_ = 0;
};

// Lets an asynchronous owner (an engine thread) move a deferred request on later.
class Continuation {
 public:
  Continuation() = default;
  Continuation(const Continuation& other) = delete;
  Continuation& operator=(const Continuation& other) = delete;
  Continuation(Continuation&& other) noexcept;
  Continuation& operator=(Continuation&& other) noexcept;
  ~Continuation();

  // Sends the request on through request port `port` of the stage that deferred it.
  void resume(PortId port);
  // Same, but into a stream port: returns the writer for the response chunks.
  ChunkWriter resume_streaming(PortId port);
  void fail(RequestError error);

  Request& request() const { return *request_; }
  explicit operator bool() const { return request_ != nullptr; }

 private:
  friend struct detail::StageIoAccess;
  void release();
  std::shared_ptr<Request> request_;
  detail::PipelineCore* core_ = nullptr;
  size_t stage_index_ = 0;
};

// What a request stage can do with its request besides routing it.
class StageIo {
 public:
  // The writer for response chunks leaving through stream port `port`; return Route::streaming().
  ChunkWriter open_stream(PortId port);
  // Hand the request to an asynchronous owner; return Route::deferred().
  Continuation defer();
  const std::shared_ptr<Request>& request_ptr() const { return request_; }

 private:
  friend struct detail::StageIoAccess;
  StageIo(detail::PipelineCore& core, const std::shared_ptr<Request>& request, size_t stage_index)
      : core_(core), request_(request), stage_index_(stage_index) {}
  detail::PipelineCore& core_;
  const std::shared_ptr<Request>& request_;
  size_t stage_index_;
};

class RequestStage : public Stage {
 public:
  virtual Route process(Request& request, StageIo& io) = 0;
};

// Per-request state of a stream stage (derive from it; see StreamContext::state).
struct StreamState {
  virtual ~StreamState() = default;
};

// One chunk's view of a stream stage: the request, its state, and the way out.
class StreamContext {
 public:
  Request& request() { return request_; }

  // Passes a chunk on, in order. Emitting a chunk with `finish` set ends this stage's output
  // for the request: later input chunks are not delivered, and the producer is told to stop.
  void emit(Chunk chunk);

  // Per-request state for this stage, constructed from `args` on first use.
  template <class State, class... Args>
  State& state(Args&&... args) {
    if (!state_) state_ = std::make_unique<State>(std::forward<Args>(args)...);
    return static_cast<State&>(*state_);
  }

 private:
  friend struct detail::StageIoAccess;
  StreamContext(Request& request, std::unique_ptr<StreamState>& state, void* emitter,
                void (*emit)(void*, Chunk&&))
      : request_(request), state_(state), emitter_(emitter), emit_(emit) {}
  Request& request_;
  std::unique_ptr<StreamState>& state_;
  void* emitter_;
  void (*emit_)(void*, Chunk&&);
};

class StreamStage : public Stage {
 public:
  // Called for each chunk of one request, in stream order, never concurrently for one request.
  // The last chunk has `finish` set: flush anything held back, then emit a final chunk (if the
  // stage emits none, the runtime passes the finish reason on by itself).
  virtual void process(StreamContext& context, Chunk chunk) = 0;
};

}  // namespace chatflow
