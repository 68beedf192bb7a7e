#include "framework/runtime/pipeline_core.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include <tbb/task_arena.h>

#include "framework/api/sink.h"

namespace chatflow::detail {

// Each side stores, then loads what the other stores: a release decrements a counter and then
// reads `closing`, the drain sets `closing` and then reads the counters (as does submit(), which
// counts a request in and then reads `closing`). Only sequentially consistent operations promise
// that at least one side sees the other's store; with acquire/release both loads may read the
// old values on a weak-memory CPU (ARM, POWER), and the last release's wake-up is missed.
void Lifeline::release_active() {
  if (active.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      closing.load(std::memory_order_seq_cst)) {
    std::lock_guard lock(mutex);
    idle.notify_all();
  }
}

void Lifeline::release_handle() {
  if (handles.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      closing.load(std::memory_order_seq_cst)) {
    std::lock_guard lock(mutex);
    idle.notify_all();
  }
}

void Lifeline::wait_idle() {
  closing.store(true, std::memory_order_seq_cst);
  std::unique_lock lock(mutex);
  idle.wait(lock, [this] {
    return active.load(std::memory_order_seq_cst) == 0 &&
           handles.load(std::memory_order_seq_cst) == 0;
  });
}

namespace {

// Every pipeline's graph lives in this one explicit arena. A graph otherwise attaches to the arena
// of the thread that builds it, which for a reload is a passing thread's own implicit arena.
// Seen that way (server_reload, two copies at once under ASan: 2 hangs in 16 runs): after a
// SIGHUP reload the server stopped answering, no oneTBB worker thread was left, and the old
// graph's last task never ran. In one long-lived explicit arena, requests handed in from outside
// it are enqueued (which oneTBB guarantees to run), the arena and its worker threads outlive
// every pipeline, and pipelines do not compete for workers: 0 hangs in 36 runs.
tbb::task_arena& graph_arena() {
  static tbb::task_arena arena;
  return arena;
}

}  // namespace

// Marks the calling thread as running `stage` for the length of one stage call.
class RunningStage {
 public:
  explicit RunningStage(size_t stage) : previous_(running_stage) {
    running_stage = static_cast<int32_t>(stage);
  }
  ~RunningStage() { running_stage = previous_; }
  RunningStage(const RunningStage&) = delete;
  RunningStage& operator=(const RunningStage&) = delete;

 private:
  int32_t previous_;
};

struct PipelineCore::StageRunner {
  PipelineCore* core;
  size_t index;
  Stage* stage;
  size_t slot;  // stream stages only
  FlowNode* node = nullptr;
};

struct PipelineCore::SinkRunner {
  PipelineCore* core;
};

PipelineCore::PipelineCore(PipelineSpec spec, ResourceMap resources,
                           std::vector<std::unique_ptr<Stage>> stages)
    : spec_(std::move(spec)),
      resources_(std::move(resources)),
      stages_(std::move(stages)),
      lifeline_(std::make_shared<Lifeline>()) {
  graph_arena().execute([this] { graph_ = std::make_unique<tbb::flow::graph>(); });
  for (size_t i = 0; i < stages_.size(); ++i) {
    bool stream = spec_.stages[i].type->kind == StageKind::stream;
    auto runner = std::make_unique<StageRunner>(
        StageRunner{this, i, stages_[i].get(), stream ? slot_count_ : 0});
    if (stream) ++slot_count_;
    runner->node = nodes_
                       .emplace_back(make_flow_node(
                           *graph_, spec_.stages[i].type->ports.size(), spec_.stages[i].concurrency,
                           stream ? &run_stream_stage : &run_request_stage, runner.get()))
                       .get();
    runners_.push_back(std::move(runner));
  }
  ++slot_count_;  // the sink's
  sink_runner_ = std::make_unique<SinkRunner>(SinkRunner{this});
  FlowNode& sink = *nodes_.emplace_back(
      make_flow_node(*graph_, 0, kUnlimitedConcurrency, &run_sink, sink_runner_.get()));
  for (const auto& connection : spec_.connections) {
    FlowNode& target = connection.to_stage == kSinkStage ? sink : *nodes_[connection.to_stage];
    tbb::flow::make_edge(nodes_[connection.from_stage]->output(connection.from_port),
                         target.input());
  }
}

PipelineCore::~PipelineCore() {
  lifeline_->wait_idle();
  graph_->wait_for_all();
}

void PipelineCore::drain() {
  lifeline_->wait_idle();
}

Admission PipelineCore::submit(std::shared_ptr<Request> request) {
  if (lifeline_->closing.load(std::memory_order_acquire)) return Admission::closed;
  size_t active = lifeline_->active.load(std::memory_order_relaxed);
  do {
    if (active >= spec_.max_in_flight) return Admission::full;
  } while (!lifeline_->active.compare_exchange_weak(active, active + 1, std::memory_order_seq_cst));
  // Counted in first, then `closing` read (see Lifeline): a drain that began meanwhile either
  // waits for this request or is seen here, never neither.
  if (lifeline_->closing.load(std::memory_order_seq_cst)) {
    lifeline_->release_active();
    return Admission::closed;
  }
  if (request->runtime_) {
    lifeline_->release_active();
    throw std::logic_error("request '" + request->id + "' was submitted twice");
  }
  request->runtime_ =
      std::make_unique<RequestRuntime>(this, lifeline_, slot_count_, stages_.size());
  request->submitted_ns_ = now_ns();
  nodes_.front()->input().try_put(Envelope{std::move(request), nullptr, 0, nullptr});
  return Admission::accepted;
}

void PipelineCore::run_request_stage(void* runner, const Envelope& envelope) {
  auto& stage_runner = *static_cast<StageRunner*>(runner);
  stage_runner.core->process_request(stage_runner, envelope);
}

void PipelineCore::run_stream_stage(void* runner, const Envelope& envelope) {
  auto& stage_runner = *static_cast<StageRunner*>(runner);
  StreamSlot& slot = envelope.request->runtime_->slots[stage_runner.slot];
  std::lock_guard lock(slot.mutex);
  stage_runner.core->deliver_in_order(slot, envelope, [&](const Envelope& next) {
    stage_runner.core->deliver_to_stage(stage_runner, slot, next);
  });
}

void PipelineCore::run_sink(void* runner, const Envelope& envelope) {
  PipelineCore& core = *static_cast<SinkRunner*>(runner)->core;
  StreamSlot& slot = envelope.request->runtime_->sink_slot;
  std::lock_guard lock(slot.mutex);
  core.deliver_in_order(slot, envelope,
                        [&](const Envelope& next) { core.deliver_to_sink(slot, next); });
}

template <class Deliver>
void PipelineCore::deliver_in_order(StreamSlot& slot, const Envelope& envelope, Deliver deliver) {
  // A finished (cancelled, failed) request's chunks go nowhere: drop them, and whatever waits.
  if (envelope.request->finished()) {
    slot.early.clear();
    return;
  }
  if (envelope.sequence != slot.next_in) {
    slot.early.emplace(envelope.sequence, envelope);
    return;
  }
  deliver(envelope);
  ++slot.next_in;
  for (auto next = slot.early.begin(); next != slot.early.end() && next->first == slot.next_in;
       next = slot.early.begin()) {
    Envelope ready = std::move(next->second);
    slot.early.erase(next);
    deliver(ready);
    ++slot.next_in;
  }
}

RequestError PipelineCore::stage_error(size_t stage, const std::exception& error) const {
  return RequestError{500,
                      "server_error",
                      "stage '" + spec_.stages[stage].name + "' (" +
                          spec_.stages[stage].type->name + ") failed: " + error.what(),
                      "stage_failed",
                      {}};
}

bool PipelineCore::may_continue(Request& request, int64_t now) {
  if (request.finished()) return false;
  if (request.cancelled()) {
    finish(request, request.cancel_error_, std::nullopt, false);
    return false;
  }
  if (request.deadline != Clock::time_point::max() &&
      Clock::time_point(std::chrono::nanoseconds(now)) > request.deadline) {
    finish(request,
           RequestError{504, "timeout", "the request passed its deadline", "deadline_exceeded", {}},
           std::nullopt, false);
    return false;
  }
  return true;
}

void PipelineCore::process_request(StageRunner& runner, const Envelope& envelope) {
  Request& request = *envelope.request;
  int64_t start = now_ns();
  if (!may_continue(request, start)) return;
  Route route = Route::streaming();
  try {
    StageIo io = StageIoAccess::make_io(*this, envelope.request, runner.index);
    RunningStage running(runner.index);
    route = static_cast<RequestStage*>(runner.stage)->process(request, io);
  } catch (const RequestFailure& failure) {
    request.runtime_->timings[runner.index].record(start, now_ns());
    finish(request, failure.error(), std::nullopt, false);
    return;
  } catch (const std::exception& error) {
    request.runtime_->timings[runner.index].record(start, now_ns());
    finish(request, stage_error(runner.index, error), std::nullopt, false);
    return;
  }
  request.runtime_->timings[runner.index].record(start, now_ns());
  if (route.kind() != Route::Kind::port) return;
  const auto& ports = spec_.stages[runner.index].type->ports;
  if (route.port() >= ports.size() || ports[route.port()].kind != PortKind::request) {
    finish(request,
           stage_error(runner.index, std::logic_error("it routed the request to port " +
                                                      std::to_string(route.port()) +
                                                      ", which is not one of its request ports")),
           std::nullopt, false);
    return;
  }
  request.runtime_->timings[runner.index].record_port(route.port());
  runner.node->put(route.port(), envelope);
}

namespace {

// The stream slot whose stage's process() runs on this thread, with the slot's lock held (a
// HeldStream used or let go of there must not take it again).
thread_local StreamSlot* slot_in_process = nullptr;

class ProcessingSlot {
 public:
  explicit ProcessingSlot(StreamSlot& slot) : previous_(slot_in_process) {
    slot_in_process = &slot;
  }
  ~ProcessingSlot() { slot_in_process = previous_; }
  ProcessingSlot(const ProcessingSlot&) = delete;
  ProcessingSlot& operator=(const ProcessingSlot&) = delete;

 private:
  StreamSlot* previous_;
};

RequestError abandoned_error() {
  return RequestError{500,
                      "server_error",
                      "the stream was abandoned by the stage that held its end",
                      "abandoned",
                      {}};
}

// Passes a stream stage's output on, numbering it for the next consumer.
struct StreamEmitter {
  FlowNode* node;
  StreamSlot* slot;
  const std::shared_ptr<Request>* request;

  void put(Envelope envelope) {
    envelope.sequence = slot->next_out++;
    node->put(0, envelope);
  }

  static void emit(void* self, Chunk&& chunk) {
    auto& emitter = *static_cast<StreamEmitter*>(self);
    if (emitter.slot->ended) return;
    if (chunk.is_final()) emitter.end();
    emitter.put(Envelope{*emitter.request, std::make_shared<Chunk>(std::move(chunk)), 0, nullptr});
  }

  void fail(RequestError error) {
    if (slot->ended) return;
    end();
    put(Envelope{*request, nullptr, 0, std::make_shared<const RequestError>(std::move(error))});
  }

  void end() {
    slot->ended = true;
    StageIoAccess::runtime(**request)->stream_closed.store(true, std::memory_order_release);
  }
};

}  // namespace

HeldStream StageIoAccess::hold(StreamContext& context) {
  auto& emitter = *static_cast<StreamEmitter*>(context.emitter_);
  if (emitter.slot->held) throw std::logic_error("the stream's end is already held");
  emitter.slot->held = true;
  runtime(**emitter.request)->lifeline->handles.fetch_add(1, std::memory_order_relaxed);
  HeldStream held;
  held.request_ = *emitter.request;
  held.node_ = emitter.node;
  held.slot_ = emitter.slot;
  return held;
}

}  // namespace chatflow::detail

namespace chatflow {

HeldStream hold_stream(StreamContext& context) {
  return detail::StageIoAccess::hold(context);
}

HeldStream::HeldStream(HeldStream&& other) noexcept
    : request_(std::move(other.request_)),
      node_(std::exchange(other.node_, nullptr)),
      slot_(std::exchange(other.slot_, nullptr)) {}

HeldStream& HeldStream::operator=(HeldStream&& other) noexcept {
  if (this != &other) {
    HeldStream released(std::move(*this));
    request_ = std::move(other.request_);
    node_ = std::exchange(other.node_, nullptr);
    slot_ = std::exchange(other.slot_, nullptr);
  }
  return *this;
}

HeldStream::~HeldStream() {
  if (!request_) return;
  if (detail::slot_in_process == slot_) {
    // Inside the stage's process() (a throw after holding, most likely), whose thread holds the
    // slot's lock: the runtime ends the stream once process() is over, with the error it threw.
    slot_->held = false;
    slot_->abandoned = true;
    release();
    return;
  }
  fail(detail::abandoned_error());
}

void HeldStream::emit(Chunk chunk) {
  if (!request_) return;
  bool last = chunk.is_final();
  {
    // Inside the stage's process() its thread already holds the lock.
    std::unique_lock lock(slot_->mutex, std::defer_lock);
    if (detail::slot_in_process != slot_) lock.lock();
    detail::StreamEmitter emitter{node_, slot_, &request_};
    detail::StreamEmitter::emit(&emitter, std::move(chunk));
  }
  if (last) release();
}

void HeldStream::fail(RequestError error) {
  if (!request_) return;
  {
    std::unique_lock lock(slot_->mutex, std::defer_lock);
    if (detail::slot_in_process != slot_) lock.lock();
    detail::StreamEmitter emitter{node_, slot_, &request_};
    emitter.fail(std::move(error));
  }
  release();
}

// Through the request's lifeline: this may be the handle a draining pipeline waits for.
void HeldStream::release() {
  std::shared_ptr<Request> request = std::move(request_);
  node_ = nullptr;
  slot_ = nullptr;
  detail::StageIoAccess::runtime(*request)->lifeline->release_handle();
}

}  // namespace chatflow

namespace chatflow::detail {

void PipelineCore::deliver_to_stage(StageRunner& runner, StreamSlot& slot,
                                    const Envelope& envelope) {
  Request& request = *envelope.request;
  if (slot.ended) return;
  StreamEmitter emitter{runner.node, &slot, &envelope.request};
  if (envelope.failure) {
    emitter.slot->ended = true;
    emitter.put(envelope);
    return;
  }
  int64_t start = now_ns();
  if (!may_continue(request, start)) return;
  // Each chunk has exactly one consumer (ports never fan out), so it can be moved from.
  Chunk chunk = std::move(*envelope.chunk);
  std::optional<FinishReason> input_finish = chunk.finish;
  StreamContext context =
      StageIoAccess::make_context(request, slot.state, &emitter, &StreamEmitter::emit);
  try {
    RunningStage running(runner.index);
    ProcessingSlot processing(slot);
    static_cast<StreamStage*>(runner.stage)->process(context, std::move(chunk));
  } catch (const RequestFailure& failure) {
    emitter.fail(failure.error());
  } catch (const std::exception& error) {
    emitter.fail(stage_error(runner.index, error));
  }
  // A held end let go of inside process() without a throw: the stream would stay open.
  if (std::exchange(slot.abandoned, false)) emitter.fail(abandoned_error());
  request.runtime_->timings[runner.index].record(start, now_ns());
  // A stage that swallowed the final chunk would leave the request open forever (unless it
  // holds the end, to emit it later).
  if (input_finish && !slot.ended && !slot.held) {
    Chunk last;
    last.finish = input_finish;
    StreamEmitter::emit(&emitter, std::move(last));
  }
}

void PipelineCore::deliver_to_sink(StreamSlot&, const Envelope& envelope) {
  Request& request = *envelope.request;
  if (request.finished()) return;
  if (envelope.failure) {
    finish(request, *envelope.failure, std::nullopt, true);
    return;
  }
  const Chunk& chunk = *envelope.chunk;
  // The final chunk's usage is the request's from here on: every stream stage is done with it,
  // and a stage whose answer came from another thread (an upstream engine) cannot have written
  // the request without racing the stages reading it.
  if (chunk.is_final() && chunk.usage) request.usage = *chunk.usage;
  try {
    if (request.sink) request.sink->on_chunk(request, chunk);
  } catch (const RequestFailure& failure) {
    finish(request, failure.error(), std::nullopt, true);
    return;
  } catch (const std::exception& error) {
    finish(
        request,
        RequestError{
            500, "server_error", std::string("the response sink failed: ") + error.what(), {}, {}},
        std::nullopt, true);
    return;
  }
  if (chunk.is_final()) finish(request, std::nullopt, chunk.finish, true);
}

void PipelineCore::finish(Request& request, std::optional<RequestError> error,
                          std::optional<FinishReason> reason, bool sink_locked) {
  RequestRuntime& runtime = *request.runtime_;
  std::unique_lock lock(runtime.sink_slot.mutex, std::defer_lock);
  if (!sink_locked) lock.lock();
  if (request.finished_.load(std::memory_order_relaxed)) return;
  request.error_ = std::move(error);
  request.finish_reason_ = request.error_ ? std::nullopt : reason;
  request.finished_ns_ = now_ns();
  request.finished_.store(true, std::memory_order_release);
  runtime.core = nullptr;
  // From here on nothing touches the pipeline (only the request and its sink): once released,
  // a draining pipeline may be destroyed, and the sink may already submit the next request.
  runtime.lifeline->release_active();
  if (request.sink) {
    try {
      request.sink->on_finish(request);
    } catch (const std::exception& failure) {
      // The request is over either way; the sink's own failure has nowhere else to go.
      std::fprintf(stderr, "chatflow: sink failed finishing request '%s': %s\n", request.id.c_str(),
                   failure.what());
    }
  }
}

void PipelineCore::cancel(Request& request, RequestError error) {
  RequestRuntime& runtime = *request.runtime_;
  std::lock_guard lock(runtime.sink_slot.mutex);
  // The core pointer is only valid while the request is unfinished, which the lock keeps true.
  if (request.finished_.load(std::memory_order_relaxed) || runtime.core == nullptr) return;
  request.cancel_error_ = error;
  request.cancelled_.store(true, std::memory_order_release);
  runtime.core->finish(request, std::move(error), std::nullopt, true);
}

void PipelineCore::fail(Request& request, RequestError error) {
  finish(request, std::move(error), std::nullopt, false);
}

void PipelineCore::write_chunk(const std::shared_ptr<Request>& request, size_t stage, PortId port,
                               Chunk chunk) {
  RequestRuntime& runtime = *request->runtime_;
  if (chunk.is_final() ? runtime.origin_ended.exchange(true, std::memory_order_acq_rel)
                       : runtime.origin_ended.load(std::memory_order_acquire)) {
    return;
  }
  // Nothing downstream reads a finished request's chunks: a producer that keeps writing after
  // a cancel costs no more than this check.
  if (request->finished()) return;
  uint32_t sequence = runtime.origin_sequence.fetch_add(1, std::memory_order_relaxed);
  nodes_[stage]->put(
      port, Envelope{request, std::make_shared<Chunk>(std::move(chunk)), sequence, nullptr});
}

void PipelineCore::write_failure(const std::shared_ptr<Request>& request, size_t stage, PortId port,
                                 RequestError error) {
  RequestRuntime& runtime = *request->runtime_;
  if (runtime.origin_ended.exchange(true, std::memory_order_acq_rel)) return;
  runtime.stream_closed.store(true, std::memory_order_release);
  uint32_t sequence = runtime.origin_sequence.fetch_add(1, std::memory_order_relaxed);
  nodes_[stage]->put(port, Envelope{request, nullptr, sequence,
                                    std::make_shared<const RequestError>(std::move(error))});
}

void PipelineCore::route(const std::shared_ptr<Request>& request, size_t stage, PortId port) {
  const auto& ports = spec_.stages[stage].type->ports;
  if (port >= ports.size() || ports[port].kind != PortKind::request) {
    fail(*request, stage_error(stage, std::logic_error("it resumed the request on port " +
                                                       std::to_string(port) +
                                                       ", which is not one of its request ports")));
    return;
  }
  request->runtime_->timings[stage].record_port(port);
  nodes_[stage]->put(port, Envelope{request, nullptr, 0, nullptr});
}

RequestRuntime* StageIoAccess::runtime(Request& request) {
  return request.runtime_.get();
}

}  // namespace chatflow::detail
