// echo: answers with the last user message (or a completion's prompt), streamed a few words per
// chunk. It starts the
// response stream without a model, so a pipeline (and everything after it: stream stages, the
// sink, the server) can be run and tested on any machine.
#include <optional>

#include "framework/api/registry.h"
#include "framework/chat/reasoning_split.h"

namespace chatflow {
namespace {

struct EchoConfig {
  std::string prefix;
  int words_per_chunk = 1;
  std::string reasoning_format = "none";
  std::string tool_format = "none";
};

class EchoStage final : public RequestStage {
 public:
  explicit EchoStage(EchoConfig config) : config_(std::move(config)) {}

  Route process(Request& request, StageIo& io) override {
    bool has_user_message = request.kind == RequestKind::completion;
    for (const auto& message : request.messages)
      has_user_message |= message.role == "user";
    if (!has_user_message) {
      throw RequestFailure(400, "invalid_request_error", "echo needs a user message to repeat");
    }
    // Standing in for a reasoning model: <think>...</think> in the echoed text is its reasoning.
    request.reasoning = {config_.reasoning_format == "deepseek", false};
    // Echoed text cannot follow a schema: refused rather than answered unconstrained.
    if (request.generation.response_format.kind != ResponseFormat::Kind::text) {
      throw RequestFailure(RequestError{400, "invalid_request_error",
                                        "this pipeline's echo stage cannot follow response_format",
                                        "unsupported_parameter", "response_format"});
    }
    // Standing in for a model that calls tools: calls in the echoed text are its calls.
    if (!request.generation.tools.empty() && request.generation.tool_choice != ToolChoice::none) {
      if (config_.tool_format == "none" ||
          request.generation.tool_choice != ToolChoice::automatic) {
        throw RequestFailure(RequestError{400, "invalid_request_error",
                                          "this pipeline's echo stage cannot call tools",
                                          "unsupported_parameter", "tools"});
      }
      request.tool_format = config_.tool_format == "hermes"    ? ToolCallFormat::hermes
                            : config_.tool_format == "llama3"  ? ToolCallFormat::llama3
                            : config_.tool_format == "mistral" ? ToolCallFormat::mistral
                                                               : ToolCallFormat::generic;
    }
    ChunkWriter writer = io.open_stream(kOut);
    std::string text =
        config_.prefix +
        (request.kind == RequestKind::completion ? request.prompt : request.last_user_message());
    // As detokenize does for a model: the reasoning leaves the text for its own field.
    std::optional<chat::ReasoningSplitter> reasoning;
    if (request.reasoning.enabled && request.kind == RequestKind::chat) reasoning.emplace(false);
    auto write = [&writer, &reasoning](Chunk chunk) {
      if (reasoning) chat::split_reasoning(*reasoning, chunk);
      if (!chunk.text.empty() || !chunk.reasoning.empty() || chunk.is_final())
        writer.write(std::move(chunk));
    };
    // A chunk is a run of words, each keeping the whitespace before it, so the chunks
    // concatenate back to exactly the input.
    size_t position = 0;
    while (position < text.size()) {
      size_t end = position;
      for (int word = 0; word < config_.words_per_chunk && end < text.size(); ++word) {
        end = text.find_first_not_of(" \t\n", end);
        if (end == std::string::npos) end = text.size();
        end = text.find_first_of(" \t\n", end);
        if (end == std::string::npos) end = text.size();
      }
      write(Chunk::delta(text.substr(position, end - position)));
      position = end;
    }
    Chunk last;
    last.finish = FinishReason::stop;
    write(std::move(last));
    return Route::streaming();
  }

 private:
  static constexpr PortId kOut = 0;
  EchoConfig config_;
};

StageTypeInfo echo_stage_type() {
  StageTypeBuilder<EchoConfig> type(
      "echo", StageKind::request,
      "Streams the last user message (or the prompt) back, a few words per chunk (no model "
      "needed).");
  type.port("out", PortKind::stream, "the echoed text");
  type.config().key("prefix", &EchoConfig::prefix, "text sent before the echoed message");
  type.config()
      .key("words_per_chunk", &EchoConfig::words_per_chunk, "words in each streamed chunk")
      .range(1, 1'000'000);
  type.config()
      .key("reasoning_format", &EchoConfig::reasoning_format,
           "deepseek: <think>...</think> in the echoed text is reasoning, as a reasoning "
           "model's would be (for testing what follows a model)")
      .choices({"none", "deepseek"});
  type.config()
      .key("tool_format", &EchoConfig::tool_format,
           "hermes, llama3, mistral or generic: tool calls in the echoed text, written so, are "
           "the answer's tool calls (tool_choice auto only; for testing what follows a model)")
      .choices({"none", "hermes", "llama3", "mistral", "generic"});
  type.create(
      [](const EchoConfig& config, StageContext&) { return std::make_unique<EchoStage>(config); });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(echo_stage_type);

}  // namespace
}  // namespace chatflow
