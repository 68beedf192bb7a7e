// The hand-off between the pipeline and the engine thread for one request: prefill starts a
// generation and defers the request; when the first token is sampled the engine resumes the
// request into decode, which attaches the response stream. Tokens produced before that are
// buffered, so generation never waits for the pipeline.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "framework/api/stage.h"
#include "framework/engine/scheduler.h"

namespace chatflow {

// One request's generation as the engine sees it. The engine owns it; the request holds it only
// until decode attaches. It keeps the request alive through its continuation and writer alone,
// and lets go of each as soon as its work is done, so no ownership cycle outlives the request.
class GenerationStream final : public engine::SequenceObserver {
 public:
  GenerationStream(std::shared_ptr<Request> request, Continuation continuation, PortId resume_port);

  // Decode's side: from now on chunks go to `writer` (buffered ones first).
  void attach(ChunkWriter writer);

  void on_token(const engine::SampledToken& token, bool first,
                const engine::SequenceUsage& usage) override;
  void on_finish(engine::FinishCause cause, const engine::SequenceUsage& usage) override;
  void on_error(const std::string& message) override;
  bool cancelled() const override;
  void on_dropped() override;
  void on_admitted() override;

 private:
  void deliver(Chunk chunk);
  void resume_once();

  std::weak_ptr<Request> request_;
  bool want_logprobs_;
  bool started_ = false;  // engine thread only
  mutable std::mutex mutex_;
  Continuation continuation_;
  PortId resume_port_;
  ChunkWriter writer_;
  std::vector<Chunk> buffered_;
  std::optional<RequestError> error_;
  bool writer_done_ = false;  // the final chunk or an error went out: no writer is needed any more
};

// The attachment key under which prefill leaves the GenerationStream for decode.
inline constexpr const char* kGenerationAttachment = "generation";

}  // namespace chatflow
