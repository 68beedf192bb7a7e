#include "framework/chat/reasoning_split.h"

#include "framework/text/stream_markers.h"

namespace chatflow::chat {
using text::is_space;
using text::partial_marker;
namespace {

constexpr std::string_view kOpen = kThinkingOpens;
constexpr std::string_view kClose = kThinkingCloses;

}  // namespace

bool ends_inside_thinking(std::string_view prompt) {
  while (!prompt.empty() && is_space(prompt.back()))
    prompt.remove_suffix(1);
  return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

ReasoningSplitter::ReasoningSplitter(bool open_at_start)
    : part_(open_at_start ? Part::reasoning : Part::undecided) {}

void ReasoningSplitter::emit(std::string_view text, Pieces& pieces) {
  if (at_part_start_) {
    size_t first = 0;
    while (first < text.size() && is_space(text[first]))
      ++first;
    text.remove_prefix(first);
    if (text.empty()) return;
    at_part_start_ = false;
  }
  (part_ == Part::reasoning ? pieces.reasoning : pieces.content).append(text);
}

ReasoningSplitter::Pieces ReasoningSplitter::push(std::string_view text, bool last) {
  Pieces pieces;
  held_.append(text);
  release(pieces);
  if (last) {
    if (part_ == Part::undecided) part_ = Part::content;
    emit(held_, pieces);
    held_.clear();
  }
  return pieces;
}

// Emits what the held text decides, keeping back only what could still be a marker.
void ReasoningSplitter::release(Pieces& pieces) {
  if (part_ == Part::undecided) {
    // Only an answer that opens with the marker (after whitespace) reasons.
    size_t first = 0;
    while (first < held_.size() && is_space(held_[first]))
      ++first;
    std::string_view rest = std::string_view(held_).substr(first);
    if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return;
    if (rest.substr(0, kOpen.size()) == kOpen) {
      part_ = Part::reasoning;
      held_.erase(0, first + kOpen.size());
    } else {
      part_ = Part::content;
    }
  }
  if (part_ == Part::reasoning) {
    size_t close = held_.find(kClose);
    if (close == std::string::npos) {
      size_t keep = partial_marker(held_, kClose);
      emit(std::string_view(held_).substr(0, held_.size() - keep), pieces);
      held_.erase(0, held_.size() - keep);
      return;
    }
    emit(std::string_view(held_).substr(0, close), pieces);
    held_.erase(0, close + kClose.size());
    part_ = Part::content;
    at_part_start_ = true;
  }
  emit(held_, pieces);
  held_.clear();
}

ReasoningSplitter::Pieces ReasoningSplitter::split(std::string_view text, bool open_at_start) {
  return ReasoningSplitter(open_at_start).push(text, true);
}

void split_reasoning(ReasoningSplitter& splitter, Chunk& chunk) {
  ReasoningSplitter::Pieces pieces = splitter.push(chunk.text, chunk.is_final());
  chunk.text = std::move(pieces.content);
  chunk.reasoning += pieces.reasoning;
}

}  // namespace chatflow::chat
