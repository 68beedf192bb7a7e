// Reads an OpenAI-compatible engine's streamed answer (server-sent events of
// chat.completion.chunk or text_completion objects, then "data: [DONE]") and turns each event
// into what chatflow's chunks need: content, reasoning (vLLM's and llama.cpp's
// "reasoning_content", or "reasoning"), tool-call pieces, the finish reason, and usage from the
// usage event that stream_options.include_usage asks for. An error object in the stream (vLLM,
// llama.cpp and OpenAI send {"error": {...}}) is an event of its own. Bytes arrive in arbitrary
// pieces: an event is read once its blank line arrived.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/api/chunk.h"

namespace chatflow::upstream {

struct ToolCallPiece {
  int index = 0;
  std::string id;    // on a call's first piece
  std::string name;  // on a call's first piece
  std::string arguments;
};

struct StreamEvent {
  enum class Kind { delta, done, error };
  Kind kind = Kind::delta;
  std::string content;
  std::string reasoning;
  std::vector<ToolCallPiece> tool_calls;
  std::optional<std::string> finish_reason;  // as the engine wrote it: stop, length, tool_calls...
  std::optional<Usage> usage;
  std::string error;  // error: the engine's message (or why the event could not be read)
  // Engine events this one stands for, when several that came together were merged; each is a
  // token for the engines this talks to (llama.cpp's server, vLLM, chatflow).
  int64_t pieces = 1;

  // Whether the event carries anything the client would see.
  bool has_output() const { return !content.empty() || !reasoning.empty() || !tool_calls.empty(); }
};

class SseReframer {
 public:
  // An event longer than this is an error (a stream that never sends its blank line).
  static constexpr size_t kMaxEventBytes = 4u << 20;

  // The events `bytes` completes, in order. Nothing is read after [DONE] or an error.
  std::vector<StreamEvent> push(std::string_view bytes);

  bool ended() const { return ended_; }

 private:
  void take_line(std::string_view line, std::vector<StreamEvent>& events);
  void dispatch(std::vector<StreamEvent>& events);

  std::string partial_line_;
  std::string data_;  // the current event's data lines, joined by '\n'
  bool has_data_ = false;
  bool ended_ = false;
};

// One event's JSON text as an event (delta, or error when it is not what an engine sends).
StreamEvent parse_stream_object(std::string_view json);

// The message of an error body an engine answers with a non-200 status ({"error": {"message"}},
// {"error": "..."}, {"message": "..."}, or the text itself, shortened).
std::string error_message_of(std::string_view body);

}  // namespace chatflow::upstream
