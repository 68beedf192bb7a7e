// Splits a model's answer into reasoning and content as reasoning models write it:
// "<think>reasoning</think>content" (QwQ, Qwen3), or "reasoning</think>content" when the prompt
// opened the block (DeepSeek-R1). Streaming: text arrives in arbitrary pieces, so a piece that
// could be the start of a marker is held back until the next one decides; whitespace at the
// start of either part is dropped, as vLLM and llama.cpp's server present it.
//
// This runs once, where a model's own text enters the stream (detokenize, or a stage standing in
// for a model): from there on reasoning travels as Chunk::reasoning. Reasoning an engine sends
// apart from its content (an upstream's reasoning_content) never passes through here.
#pragma once

#include <string>
#include <string_view>

#include "framework/api/chunk.h"
#include "framework/text/stream_markers.h"

namespace chatflow::chat {

using text::kThinkingCloses;
using text::kThinkingOpens;

// A rendered prompt that ends inside an opened thinking block (then whitespace at most): the
// answer to it starts reasoning.
bool ends_inside_thinking(std::string_view prompt);

class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool open_at_start);

  struct Pieces {
    std::string reasoning;
    std::string content;
  };
  // The parts of `text` that can be told apart now; with `last`, everything held back too.
  Pieces push(std::string_view text, bool last = false);

  // The whole of an answer at once.
  static Pieces split(std::string_view text, bool open_at_start);

 private:
  enum class Part { undecided, reasoning, content };
  Part part_;
  bool at_part_start_ = true;  // no text of the current part emitted yet
  std::string held_;

  void release(Pieces& pieces);
  void emit(std::string_view text, Pieces& pieces);
};

// Moves the reasoning `chunk.text` holds into `chunk.reasoning`, leaving the content in `text`;
// on the stream's last chunk, with whatever `splitter` held back.
void split_reasoning(ReasoningSplitter& splitter, Chunk& chunk);

}  // namespace chatflow::chat
