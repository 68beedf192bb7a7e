#include "stages/generation_stream.h"

#include "framework/bridge/engine_bridge.h"

namespace chatflow {

GenerationStream::GenerationStream(std::shared_ptr<Request> request, Continuation continuation,
                                   PortId resume_port)
    : request_(request),
      want_logprobs_(request->generation.logprobs || request->generation.top_logprobs > 0),
      continuation_(std::move(continuation)),
      resume_port_(resume_port) {}

// Chunks are written under the mutex: the buffered ones must reach the stream before any chunk
// the engine produces meanwhile (writing only queues work in the graph; it never blocks).
void GenerationStream::attach(ChunkWriter writer) {
  std::lock_guard lock(mutex_);
  for (auto& chunk : buffered_)
    writer.write(std::move(chunk));
  buffered_.clear();
  if (error_) {
    writer.fail(*error_);
  } else if (!writer_done_) {
    writer_ = std::move(writer);
  }
}

void GenerationStream::deliver(Chunk chunk) {
  std::lock_guard lock(mutex_);
  bool final = chunk.is_final();
  if (!writer_) {
    buffered_.push_back(std::move(chunk));
  } else {
    writer_.write(std::move(chunk));
    if (final) writer_ = ChunkWriter();  // done with it: let the request go
  }
  writer_done_ = writer_done_ || final;
}

void GenerationStream::resume_once() {
  Continuation continuation;
  {
    std::lock_guard lock(mutex_);
    continuation = std::move(continuation_);
  }
  if (continuation) continuation.resume(resume_port_);
}

void GenerationStream::on_admitted() {
  if (auto request = request_.lock()) {
    int64_t expected = 0;
    request->generation_times.scheduled_ns.compare_exchange_strong(expected, now_ns());
  }
}

void GenerationStream::on_token(const engine::SampledToken& token, bool first,
                                const engine::SequenceUsage& usage) {
  if (first) {
    if (auto request = request_.lock()) request->generation_times.first_token_ns = now_ns();
    // Written before the first chunk travels, so every later stage sees it.
    if (auto request = request_.lock()) request->usage.cached_prompt_tokens = usage.cached_tokens;
  }
  started_ = true;
  Chunk chunk;
  chunk.token_ids.push_back(token.token);
  if (want_logprobs_) chunk.logprobs.push_back(to_token_logprob(token));
  deliver(std::move(chunk));
  if (first) resume_once();
}

void GenerationStream::on_finish(engine::FinishCause cause, const engine::SequenceUsage& usage) {
  if (auto request = request_.lock()) {
    request->generation_times.finished_ns = now_ns();
    // The access log's notes and the trace show how speculation went for this answer.
    if (usage.drafted_tokens > 0) {
      request->annotate("speculative", std::to_string(usage.accepted_tokens) + "/" +
                                           std::to_string(usage.drafted_tokens));
    }
  }
  // Ended before any token (the first one was end-of-generation): nothing downstream reads the
  // request yet, so the count can still be written here.
  if (!started_) {
    if (auto request = request_.lock()) request->usage.cached_prompt_tokens = usage.cached_tokens;
  }
  Chunk chunk;
  chunk.finish = cause == engine::FinishCause::length ? FinishReason::length : FinishReason::stop;
  chunk.usage = to_usage(usage);
  deliver(std::move(chunk));
  resume_once();  // a generation that ended before its first token still needs decode
}

void GenerationStream::on_error(const std::string& message) {
  RequestError error{500, "server_error", "generation failed: " + message, "engine_error", {}};
  Continuation continuation;
  ChunkWriter writer;
  {
    std::lock_guard lock(mutex_);
    continuation = std::move(continuation_);
    writer = std::move(writer_);
    if (!writer && !continuation) error_ = error;
    writer_done_ = true;
  }
  if (continuation) {
    continuation.fail(error);
  } else if (writer) {
    writer.fail(error);
  }
}

void GenerationStream::on_dropped() {
  Continuation continuation;
  ChunkWriter writer;
  {
    std::lock_guard lock(mutex_);
    continuation = std::move(continuation_);
    writer = std::move(writer_);
    writer_done_ = true;
    buffered_.clear();
  }
  // Both go out of scope here; the request is already over, so dropping them changes nothing.
}

bool GenerationStream::cancelled() const {
  auto request = request_.lock();
  if (!request || request->cancelled() || request->finished()) return true;
  std::lock_guard lock(mutex_);
  return writer_ && writer_.stopped();
}

}  // namespace chatflow
