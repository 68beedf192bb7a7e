#include "framework/chat/answer_stream.h"

#include "framework/text/utf8.h"

namespace chatflow::chat {

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::stop:
      return "stop";
    case StopReason::length:
      return "length";
    case StopReason::content_filter:
      return "content_filter";
    case StopReason::tool_calls:
      return "tool_calls";
  }
  return "stop";
}

AnswerPiece AnswerStream::push(const Request& request, const Chunk& chunk) {
  bool chat = request.kind == RequestKind::chat;
  AnswerPiece piece;
  piece.text = text::repair(chunk.text);
  if (chat) piece.reasoning = text::repair(chunk.reasoning);
  if (chat && request.tool_format != ToolCallFormat::none) {
    if (!tools_) tools_.emplace(request.tool_format, request.generation.tools);
    ToolCallStreamer::Pieces pieces = tools_->push(piece.text, chunk.is_final());
    piece.text = std::move(pieces.content);
    piece.calls = std::move(pieces.calls);
  }
  if (chat) {
    // An answer's calls come either written in its text or structured, never both: the indexes
    // of the structured ones count from 0.
    for (const ToolCall& call : chunk.tool_calls) {
      piece.calls.push_back({structured_calls_++,
                             call.id.empty() ? new_tool_call_id(ToolCallFormat::hermes) : call.id,
                             call.name, call.arguments});
    }
  }
  if (chunk.finish) {
    switch (*chunk.finish) {
      case FinishReason::stop:
        piece.stop = called() ? StopReason::tool_calls : StopReason::stop;
        break;
      case FinishReason::length:
        piece.stop = StopReason::length;
        break;
      case FinishReason::content_filter:
        piece.stop = StopReason::content_filter;
        break;
    }
  }
  return piece;
}

void GatheredAnswer::add(AnswerPiece piece) {
  text += piece.text;
  reasoning += piece.reasoning;
  for (ToolCallDelta& delta : piece.calls) {
    if (delta.index >= 0 && static_cast<size_t>(delta.index) < calls.size()) {
      calls[delta.index].arguments += delta.arguments;
    } else {
      calls.push_back({std::move(delta.id), std::move(delta.name), std::move(delta.arguments)});
    }
  }
  if (piece.stop) stop = *piece.stop;
}

}  // namespace chatflow::chat
