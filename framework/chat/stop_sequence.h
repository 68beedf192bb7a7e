// Which of the request's stop strings ended its answer. The stage that applies them (detokenize)
// notes the string's index in Request::generation.stop as an annotation (an index, never the
// request's own text, which would otherwise reach the access log and traces); an edge that tells
// its client which one matched (Anthropic's stop_sequence) reads it back here.
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>

#include "framework/api/request.h"

namespace chatflow::chat {

inline constexpr std::string_view kStopSequenceAnnotation = "stop_sequence";

// Notes that `matched`, one of the request's stop strings, ended the answer.
inline void note_stop_sequence(Request& request, const std::string& matched) {
  const auto& stops = request.generation.stop;
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i] == matched) {
      request.annotate(std::string(kStopSequenceAnnotation), std::to_string(i));
      return;
    }
  }
}

// The stop string that ended the request's answer, if one did.
inline std::optional<std::string> matched_stop_sequence(const Request& request) {
  auto note = request.annotation(kStopSequenceAnnotation);
  if (!note) return std::nullopt;
  size_t index = 0;
  auto [end, error] = std::from_chars(note->data(), note->data() + note->size(), index);
  if (error != std::errc() || end != note->data() + note->size() ||
      index >= request.generation.stop.size())
    return std::nullopt;
  return request.generation.stop[index];
}

}  // namespace chatflow::chat
