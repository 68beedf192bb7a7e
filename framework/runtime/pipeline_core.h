// The runtime behind Pipeline: the oneTBB graph and the per-request bookkeeping. Internal to the
// framework; stages see only stage.h.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <tbb/flow_graph.h>

#include "framework/api/held_stream.h"
#include "framework/api/request.h"
#include "framework/api/stage.h"
#include "framework/loading/pipeline_spec.h"
#include "framework/runtime/pipeline.h"

namespace chatflow::detail {

// What travels along graph edges: a request, and during the stream phase one of its chunks with
// its position in the stream (so each stream consumer can restore the order that concurrent
// tasks lose).
// A failure during the stream phase travels as an envelope of its own, in sequence, so the
// chunks emitted before it still reach the sink first.
struct Envelope {
  std::shared_ptr<Request> request;
  std::shared_ptr<Chunk> chunk;
  uint32_t sequence = 0;
  std::shared_ptr<const RequestError> failure;
};

// A graph node with a stage's ports as outputs, hiding the port count (a template argument of
// multifunction_node) behind a virtual interface.
class FlowNode {
 public:
  virtual ~FlowNode() = default;
  virtual tbb::flow::receiver<Envelope>& input() = 0;
  virtual tbb::flow::sender<Envelope>& output(PortId port) = 0;
  // Puts into the successor of `port`; valid from the node's body and from any other thread.
  virtual void put(PortId port, const Envelope& envelope) = 0;
};

using NodeBody = void (*)(void* runner, const Envelope& envelope);

std::unique_ptr<FlowNode> make_flow_node(tbb::flow::graph& graph, size_t port_count,
                                         size_t concurrency, NodeBody body, void* runner);

// One stream consumer's view of one request: chunks that arrived early wait here, by sequence
// number, until the ones before them were processed.
struct StreamSlot {
  std::mutex mutex;
  uint32_t next_in = 0;
  uint32_t next_out = 0;
  bool ended = false;      // the consumer emitted its final chunk
  bool held = false;       // the consumer holds the stream's end (held_stream.h)
  bool abandoned = false;  // it let go of it inside process(), the stream not ended
  std::map<uint32_t, Envelope> early;
  std::unique_ptr<StreamState> state;
};

// Counts what must be gone before a pipeline can be destroyed. Shared with requests and handles
// so that the last one to leave can signal without touching the (possibly freed) pipeline.
struct Lifeline {
  std::atomic<size_t> active{0};   // admitted, not finished
  std::atomic<size_t> handles{0};  // ChunkWriters and Continuations alive
  std::atomic<bool> closing{false};
  std::mutex mutex;
  std::condition_variable idle;

  void release_active();
  void release_handle();
  void wait_idle();
};

// Written by the thread running the stage, read by anyone (the sink, a cancelling thread):
// relaxed atomics make that safe at the cost of plain stores on x86.
struct AtomicStageTiming {
  std::atomic<int64_t> first_start_ns{0};
  std::atomic<int64_t> last_end_ns{0};
  std::atomic<int64_t> busy_ns{0};
  std::atomic<uint32_t> calls{0};
  std::atomic<int32_t> port{-1};

  // One writer at a time per request and stage (the request is in one place, or the stream
  // slot is locked), so load-then-store needs no read-modify-write.
  void record(int64_t start, int64_t end) {
    if (calls.load(std::memory_order_relaxed) == 0)
      first_start_ns.store(start, std::memory_order_relaxed);
    last_end_ns.store(end, std::memory_order_relaxed);
    busy_ns.store(busy_ns.load(std::memory_order_relaxed) + (end - start),
                  std::memory_order_relaxed);
    calls.store(calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  StageTiming snapshot() const {
    return {first_start_ns.load(std::memory_order_relaxed),
            last_end_ns.load(std::memory_order_relaxed), busy_ns.load(std::memory_order_relaxed),
            calls.load(std::memory_order_relaxed), port.load(std::memory_order_relaxed)};
  }
  void record_port(PortId taken) {
    port.store(static_cast<int32_t>(taken), std::memory_order_relaxed);
  }
};

struct RequestRuntime {
  RequestRuntime(PipelineCore* core, std::shared_ptr<Lifeline> lifeline, size_t slot_count,
                 size_t stage_count)
      : core(core),
        lifeline(std::move(lifeline)),
        slots(new StreamSlot[slot_count]),
        sink_slot(slots[slot_count - 1]),
        timings(new AtomicStageTiming[stage_count]),
        stage_count(stage_count) {}
  PipelineCore* core;  // valid until the request finishes; guarded by sink_slot.mutex
  std::shared_ptr<Lifeline> lifeline;
  std::unique_ptr<StreamSlot[]> slots;  // one per stream consumer; the sink's is last
  StreamSlot& sink_slot;                // its mutex also guards finishing the request
  std::unique_ptr<AtomicStageTiming[]> timings;
  size_t stage_count;
  std::atomic<uint32_t> origin_sequence{0};
  std::atomic<bool> origin_ended{false};
  // Set when a stream stage ended or failed the stream: the producer (an engine) can stop.
  std::atomic<bool> stream_closed{false};
};

class PipelineCore {
 public:
  PipelineCore(PipelineSpec spec, ResourceMap resources,
               std::vector<std::unique_ptr<Stage>> stages);
  ~PipelineCore();

  Admission submit(std::shared_ptr<Request> request);
  void drain();
  size_t active_requests() const { return lifeline_->active.load(); }
  const PipelineSpec& spec() const { return spec_; }
  const ResourceMap& resources() const { return resources_; }
  Stage* stage(size_t index) const { return stages_[index].get(); }
  std::shared_ptr<Resource> resource(const std::string& name) const {
    auto found = resources_.find(name);
    return found == resources_.end() ? nullptr : found->second;
  }

  // --- Used by the stage API (ChunkWriter, Continuation, StageIo) ---
  void write_chunk(const std::shared_ptr<Request>& request, size_t stage, PortId port, Chunk chunk);
  // Fails the request behind the chunks already written on that stream port.
  void write_failure(const std::shared_ptr<Request>& request, size_t stage, PortId port,
                     RequestError error);
  void route(const std::shared_ptr<Request>& request, size_t stage, PortId port);
  void fail(Request& request, RequestError error);
  // For Request::cancel: finishes a submitted request unless it already finished.
  static void cancel(Request& request, RequestError error);
  void acquire_handle() { lifeline_->handles.fetch_add(1, std::memory_order_relaxed); }
  void release_handle() { lifeline_->release_handle(); }

 private:
  struct StageRunner;
  struct SinkRunner;

  static void run_request_stage(void* runner, const Envelope& envelope);
  static void run_stream_stage(void* runner, const Envelope& envelope);
  static void run_sink(void* runner, const Envelope& envelope);

  void process_request(StageRunner& runner, const Envelope& envelope);
  void deliver_to_stage(StageRunner& runner, StreamSlot& slot, const Envelope& envelope);
  void deliver_to_sink(StreamSlot& slot, const Envelope& envelope);
  // Runs `deliver` for `envelope` and every early chunk it unblocks, in stream order.
  template <class Deliver>
  void deliver_in_order(StreamSlot& slot, const Envelope& envelope, Deliver deliver);

  // Ends the request exactly once: tells its sink and frees its admission slot.
  // `sink_locked`: the caller already holds the sink slot's mutex.
  void finish(Request& request, std::optional<RequestError> error,
              std::optional<FinishReason> reason, bool sink_locked);
  // Checked before every stage: false (and the request finished) when it was cancelled or
  // passed its deadline.
  bool may_continue(Request& request, int64_t now);
  RequestError stage_error(size_t stage, const std::exception& error) const;

  PipelineSpec spec_;
  ResourceMap resources_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<std::unique_ptr<StageRunner>> runners_;
  std::unique_ptr<SinkRunner> sink_runner_;
  size_t slot_count_ = 0;
  std::shared_ptr<Lifeline> lifeline_;
  std::unique_ptr<tbb::flow::graph> graph_;       // lives in graph_arena(); see pipeline_core.cpp
  std::vector<std::unique_ptr<FlowNode>> nodes_;  // per stage; the sink's node is last
};

// Gives the stage API types access to their private constructors and fields.
struct StageIoAccess {
  static StageIo make_io(PipelineCore& core, const std::shared_ptr<Request>& request,
                         size_t stage) {
    return StageIo(core, request, stage);
  }
  static StreamContext make_context(Request& request, std::unique_ptr<StreamState>& state,
                                    void* emitter, void (*emit)(void*, Chunk&&)) {
    return StreamContext(request, state, emitter, emit);
  }
  static ChunkWriter make_writer(PipelineCore& core, std::shared_ptr<Request> request, size_t stage,
                                 PortId port);
  static Continuation make_continuation(PipelineCore& core, std::shared_ptr<Request> request,
                                        size_t stage);
  static RequestRuntime* runtime(Request& request);
  static HeldStream hold(StreamContext& context);
};

}  // namespace chatflow::detail
