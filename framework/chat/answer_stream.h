// A request's answer as every wire format renders it: the chunks the pipeline streams, read once
// into content, reasoning, whole tool calls and why the answer ended. The calls a local model
// writes in its text (request.tool_format) are taken out of the content here, and calls an
// engine made whole (Chunk::tool_calls) join them, so OpenAI's chat completions, OpenAI's
// Responses and Anthropic's Messages differ only in how they write these pieces down.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "framework/api/request.h"
#include "framework/chat/tool_calls.h"

namespace chatflow::chat {

// Why an answer ended, beside FinishReason: an answer that ended by itself after calls it wrote
// whole ended to call them.
enum class StopReason { stop, length, content_filter, tool_calls };

std::string_view to_string(StopReason reason);

// What one chunk adds to the answer.
struct AnswerPiece {
  std::string text;       // content, valid UTF-8, without the calls written in it
  std::string reasoning;  // the model's thinking, valid UTF-8
  // Calls, each whole (id, name and arguments) in the piece that completes it; indexes count
  // from 0 over the answer.
  std::vector<ToolCallDelta> calls;
  std::optional<StopReason> stop;  // on the answer's last piece
};

// One request's chunks, in order, as AnswerPieces. A raw-prompt completion (RequestKind::
// completion) has text only.
class AnswerStream {
 public:
  AnswerPiece push(const Request& request, const Chunk& chunk);

  // Whether calls were found so far (the answer may end with stop reason tool_calls).
  bool called() const {
    return (tools_ && tools_->found_calls() && tools_->calls_complete()) || structured_calls_ > 0;
  }

 private:
  std::optional<ToolCallStreamer> tools_;  // for requests whose answer may call tools
  int structured_calls_ = 0;               // Chunk::tool_calls passed on so far
  int calls_given_ = 0;                    // calls of either kind passed on so far
};

// A whole answer, gathered from the pieces of an AnswerStream.
struct GatheredAnswer {
  std::string text;
  std::string reasoning;
  std::vector<ToolCall> calls;
  StopReason stop = StopReason::stop;

  void add(AnswerPiece piece);
};

}  // namespace chatflow::chat
