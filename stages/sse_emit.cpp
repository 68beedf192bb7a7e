// sse_emit: renders each chunk as the OpenAI API streams it (server-sent events of
// chat.completion.chunk or text_completion objects) into Chunk::encoded, which the HTTP server
// writes as is. The rendering itself is the server's SseEncoder, so a pipeline without this stage
// streams the same bytes; the stage exists so that stream stages after it (a plugin that signs
// or annotates events) see the encoded form.
#include "framework/api/registry.h"
#include "framework/openai/openai_protocol.h"

namespace chatflow {
namespace {

struct SseState : StreamState {
  openai::SseEncoder encoder;
};

class SseEmitStage final : public StreamStage {
 public:
  void process(StreamContext& context, Chunk chunk) override {
    chunk.encoded = context.state<SseState>().encoder.encode(context.request(), chunk);
    context.emit(std::move(chunk));
  }
};

StageTypeInfo sse_emit_stage_type() {
  StageTypeBuilder<NoConfig> type(
      "sse_emit", StageKind::stream,
      "Renders chunks as OpenAI-compatible server-sent events for the HTTP sink.");
  type.port("out", PortKind::stream, "chunks with their SSE bytes");
  type.create([](const NoConfig&, StageContext&) { return std::make_unique<SseEmitStage>(); });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(sse_emit_stage_type);

}  // namespace
}  // namespace chatflow
