// The gguf_model resource: a GGUF model with its continuous-batching scheduler, shared by the
// model stages (tokenize, prefill, decode, detokenize) that name it.
//
// The hand-off between the pipeline and the engine thread: prefill starts a generation and
// defers the request; when the first token is sampled the engine resumes the request into
// decode, which attaches the response stream. Tokens produced before that are buffered, so
// generation never waits for the pipeline.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "framework/engine/chat_template.h"
#include "framework/engine/scheduler.h"
#include "framework/api/registry.h"
#include "framework/api/served_model.h"

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

// What a sequence run outside any request produced (GgufModel::generate_text and
// next_token_logprobs are built on it).
struct SideAnswer {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprob> first_alternatives;
};

class GgufModel final : public Resource, public ServedModel {
 public:
  struct Settings {
    std::string path;
    int threads = 1;
    std::string name;
    std::string chat_template = "auto";
    engine::SchedulerConfig scheduler;
  };
  explicit GgufModel(const Settings& settings);

  const engine::Model& model() const { return *model_; }
  const engine::Tokenizer& tokenizer() const { return model_->tokenizer(); }
  engine::ChatTemplate chat_template() const { return chat_template_; }
  const std::string& name() const { return name_; }
  engine::SchedulerStats stats() const { return scheduler_->stats(); }

  const std::string& model_id() const override { return name_; }
  int64_t context_length() const override;
  std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                bool parse_special) const override;
  std::string detokenize(std::span<const int32_t> tokens) const override;
  EngineStats engine_stats() const override;

  // The request's prompt as token ids: chat messages through the chat template (control tokens
  // only where the template wrote them), a completion prompt as it is. Throws RequestFailure
  // (400) for no messages, an unknown role or an empty prompt.
  std::vector<int32_t> encode_prompt(const Request& request, bool add_generation_prompt) const;

  // Starts generating `request.prompt_tokens` and defers the request: it continues through
  // `resume_port` of the deferring stage when the first token exists. A request that can never
  // fit throws RequestFailure (400, context_length_exceeded).
  std::shared_ptr<GenerationStream> start(Request& request, StageIo& io, PortId resume_port);

  // For each prompt, the `top` most likely next tokens with their log-probabilities; the
  // prompts share the engine's batches. Blocks the calling thread until all are done (scoring
  // stages such as an LLM reranker). Throws std::runtime_error when the engine refuses or
  // fails one, or when `cancelled` turns true first.
  // Greedy text after `prompt`, at most `max_tokens` tokens (stopping at end of sequence);
  // blocks like next_token_logprobs. For stages that ask the model a side question (rewriting
  // a query).
  std::string generate_text(std::vector<int32_t> prompt, int64_t max_tokens,
                            const std::string& cache_salt, const std::function<bool()>& cancelled);

  std::vector<std::vector<engine::TokenLogprob>> next_token_logprobs(
      std::vector<std::vector<int32_t>> prompts, int top, const std::string& cache_salt,
      const std::function<bool()>& cancelled);

 private:
  // Submits a sequence outside any request; the future holds its tokens and first alternatives.
  std::future<SideAnswer> ask_aside(engine::SequenceSpec spec,
                                    const std::function<bool()>& cancelled);

  std::shared_ptr<const engine::Model> model_;
  std::unique_ptr<engine::Scheduler> scheduler_;
  engine::ChatTemplate chat_template_;
  std::string name_;
  int64_t block_tokens_;
};

// The attachment key under which prefill leaves the GenerationStream for decode.
inline constexpr const char* kGenerationAttachment = "generation";

// Where the default model is found: $CHATFLOW_MODEL, models/ in the working directory,
// ../shared/models/stories260K/. Nullopt when none exists.
std::optional<std::string> find_default_model();

}  // namespace chatflow
