// detokenize: turns token chunks into text deltas (whole UTF-8 characters only) and applies the
// request's stop strings, which may span tokens. A stop string ends the stream there: the
// engine sees the stream closed and drops the sequence at its next step.
//
// A reasoning model's "<think>...</think>" (when the request's reasoning split is on, see
// gguf_model's reasoning_format) is moved into Chunk::reasoning here, the one place the model's
// text is read for it: every later stage sees the reasoning as a field and the text as the answer.
#include <optional>

#include "framework/chat/reasoning_split.h"
#include "framework/chat/stop_sequence.h"
#include "framework/engine/detokenizer.h"
#include "stages/gguf_model.h"

namespace chatflow {
namespace {

struct DetokenizeConfig {
  std::string model;
};

struct DetokenizeState : StreamState {
  DetokenizeState(const engine::Tokenizer& tokenizer, std::vector<std::string> stop)
      : detokenizer(tokenizer, std::move(stop)) {}
  engine::IncrementalDetokenizer detokenizer;
  int64_t tokens = 0;
  std::optional<chat::ReasoningSplitter> reasoning;  // for answers that split
};

class DetokenizeStage final : public StreamStage {
 public:
  explicit DetokenizeStage(std::shared_ptr<GgufModel> model) : model_(std::move(model)) {}

  void process(StreamContext& context, Chunk chunk) override {
    Request& request = context.request();
    const engine::Tokenizer& tokenizer = model_->tokenizer();
    auto& state = context.state<DetokenizeState>(tokenizer, request.generation.stop);
    if (!state.reasoning && request.kind == RequestKind::chat && request.reasoning.enabled)
      state.reasoning.emplace(request.reasoning.open_at_start);
    Chunk out;
    for (size_t i = 0; i < chunk.token_ids.size(); ++i) {
      int32_t token = chunk.token_ids[i];
      auto delta = state.detokenizer.push(token);
      out.text += delta.text;
      out.token_ids.push_back(token);
      ++state.tokens;
      if (i < chunk.logprobs.size()) {
        TokenLogprob logprob = chunk.logprobs[i];
        logprob.text = tokenizer.piece(logprob.token);
        for (auto& alternative : logprob.top)
          alternative.text = tokenizer.piece(alternative.token);
        out.logprobs.push_back(std::move(logprob));
      }
      if (delta.stopped) {
        chat::note_stop_sequence(request, state.detokenizer.matched_stop());
        finish(request, out, FinishReason::stop, state.tokens);
        split_reasoning(state, out);
        context.emit(std::move(out));
        return;
      }
    }
    if (chunk.is_final()) {
      out.text += state.detokenizer.finish().text;
      finish(request, out, *chunk.finish,
             chunk.usage ? chunk.usage->completion_tokens : state.tokens);
      split_reasoning(state, out);
      context.emit(std::move(out));
      return;
    }
    request.usage.completion_tokens = state.tokens;
    split_reasoning(state, out);
    if (!out.text.empty() || !out.reasoning.empty() || !out.logprobs.empty())
      context.emit(std::move(out));
  }

 private:
  static void split_reasoning(DetokenizeState& state, Chunk& out) {
    if (state.reasoning) chat::split_reasoning(*state.reasoning, out);
  }

  static void finish(Request& request, Chunk& out, FinishReason reason, int64_t completion_tokens) {
    request.usage.completion_tokens = completion_tokens;
    out.finish = reason;
    out.usage = request.usage;
  }

  std::shared_ptr<GgufModel> model_;
};

StageTypeInfo detokenize_stage_type() {
  StageTypeBuilder<DetokenizeConfig> type(
      "detokenize", StageKind::stream,
      "Turns generated tokens into text deltas and applies stop strings.");
  type.port("out", PortKind::stream, "text deltas");
  type.config()
      .key("model", &DetokenizeConfig::model, "a gguf_model resource")
      .required()
      .resource("gguf_model");
  type.create([](const DetokenizeConfig& config, StageContext& context) {
    return std::make_unique<DetokenizeStage>(context.resource<GgufModel>(config.model));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(detokenize_stage_type);

}  // namespace
}  // namespace chatflow
