#include "framework/api/stage.h"
#include "framework/runtime/pipeline_core.h"

namespace chatflow {

using detail::StageIoAccess;

namespace detail {

ChunkWriter StageIoAccess::make_writer(PipelineCore& core, std::shared_ptr<Request> request,
                                       size_t stage, PortId port) {
  ChunkWriter writer;
  core.acquire_handle();
  request->runtime_->timings[stage].record_port(port);
  writer.request_ = std::move(request);
  writer.core_ = &core;
  writer.stage_index_ = stage;
  writer.port_ = port;
  return writer;
}

Continuation StageIoAccess::make_continuation(PipelineCore& core, std::shared_ptr<Request> request,
                                              size_t stage) {
  Continuation continuation;
  core.acquire_handle();
  continuation.request_ = std::move(request);
  continuation.core_ = &core;
  continuation.stage_index_ = stage;
  return continuation;
}

}  // namespace detail

ChunkWriter::ChunkWriter(const ChunkWriter& other)
    : request_(other.request_),
      core_(other.core_),
      stage_index_(other.stage_index_),
      port_(other.port_) {
  if (core_) core_->acquire_handle();
}

ChunkWriter& ChunkWriter::operator=(const ChunkWriter& other) {
  if (this != &other) *this = ChunkWriter(other);
  return *this;
}

ChunkWriter::ChunkWriter(ChunkWriter&& other) noexcept
    : request_(std::move(other.request_)),
      core_(std::exchange(other.core_, nullptr)),
      stage_index_(other.stage_index_),
      port_(other.port_) {}

ChunkWriter& ChunkWriter::operator=(ChunkWriter&& other) noexcept {
  if (this != &other) {
    ChunkWriter released(std::move(*this));
    request_ = std::move(other.request_);
    core_ = std::exchange(other.core_, nullptr);
    stage_index_ = other.stage_index_;
    port_ = other.port_;
  }
  return *this;
}

ChunkWriter::~ChunkWriter() {
  // Through the request's lifeline, not the core: this may be the handle a draining pipeline
  // is waiting for.
  if (core_) StageIoAccess::runtime(*request_)->lifeline->release_handle();
}

void ChunkWriter::write(Chunk chunk) {
  if (!core_ || request_->finished()) return;
  core_->write_chunk(request_, stage_index_, port_, std::move(chunk));
}

void ChunkWriter::fail(RequestError error) {
  if (!core_ || request_->finished()) return;
  core_->write_failure(request_, stage_index_, port_, std::move(error));
}

bool ChunkWriter::stopped() const {
  if (!request_ || request_->cancelled() || request_->finished()) return true;
  return StageIoAccess::runtime(*request_)->stream_closed.load(std::memory_order_acquire);
}

Continuation::Continuation(Continuation&& other) noexcept
    : request_(std::move(other.request_)),
      core_(std::exchange(other.core_, nullptr)),
      stage_index_(other.stage_index_) {}

Continuation& Continuation::operator=(Continuation&& other) noexcept {
  if (this != &other) {
    release();
    request_ = std::move(other.request_);
    core_ = std::exchange(other.core_, nullptr);
    stage_index_ = other.stage_index_;
  }
  return *this;
}

Continuation::~Continuation() {
  release();
}

void Continuation::release() {
  if (!core_) return;
  // A continuation dropped without an outcome would leave its request open forever.
  if (!request_->finished()) {
    core_->fail(*request_, RequestError{500,
                                        "server_error",
                                        "the request was abandoned by the stage that deferred it",
                                        "abandoned",
                                        {}});
  }
  core_ = nullptr;
  StageIoAccess::runtime(*request_)->lifeline->release_handle();
  request_.reset();
}

void Continuation::resume(PortId port) {
  if (!core_) return;
  if (!request_->finished()) core_->route(request_, stage_index_, port);
  core_ = nullptr;
  StageIoAccess::runtime(*request_)->lifeline->release_handle();
  request_.reset();
}

ChunkWriter Continuation::resume_streaming(PortId port) {
  if (!core_) return {};
  ChunkWriter writer = StageIoAccess::make_writer(*core_, request_, stage_index_, port);
  core_ = nullptr;
  StageIoAccess::runtime(*request_)->lifeline->release_handle();
  request_.reset();
  return writer;
}

void Continuation::fail(RequestError error) {
  if (!core_) return;
  core_->fail(*request_, std::move(error));
  release();
}

ChunkWriter StageIo::open_stream(PortId port) {
  return StageIoAccess::make_writer(core_, request_, stage_index_, port);
}

Continuation StageIo::defer() {
  return StageIoAccess::make_continuation(core_, request_, stage_index_);
}

void StreamContext::emit(Chunk chunk) {
  emit_(emitter_, std::move(chunk));
}

}  // namespace chatflow
