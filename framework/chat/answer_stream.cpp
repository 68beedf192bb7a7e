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
    // The streamer gives each call out once, whole: numbered here with the structured ones.
    for (ToolCallDelta& call : pieces.calls) {
      call.index = calls_given_++;
      piece.calls.push_back(std::move(call));
    }
  }
  if (chat) {
    for (const ToolCall& call : chunk.tool_calls) {
      piece.calls.push_back({calls_given_++,
                             call.id.empty() ? new_tool_call_id(ToolCallFormat::hermes) : call.id,
                             call.name, call.arguments});
      ++structured_calls_;
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
  for (ToolCallDelta& call : piece.calls)
    calls.push_back({std::move(call.id), std::move(call.name), std::move(call.arguments)});
  if (piece.stop) stop = *piece.stop;
}

}  // namespace chatflow::chat
