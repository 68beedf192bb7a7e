#include "framework/engine/detokenizer.h"

#include "framework/engine/unicode.h"
#include "framework/text/utf8.h"

namespace chatflow::engine {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               std::vector<std::string> stop_strings,
                                               bool skip_special)
    : tokenizer_(tokenizer), stop_strings_(std::move(stop_strings)), skip_special_(skip_special) {
  std::erase_if(stop_strings_, [](const std::string& stop) { return stop.empty(); });
}

IncrementalDetokenizer::Delta IncrementalDetokenizer::push(TokenId token) {
  if (stopped_) return {{}, true};
  pending_ += tokenizer_.piece(token, !skip_special_);
  return release(false);
}

IncrementalDetokenizer::Delta IncrementalDetokenizer::finish() {
  if (stopped_) return {{}, true};
  return release(true);
}

IncrementalDetokenizer::Delta IncrementalDetokenizer::release(bool at_end) {
  Delta delta;
  // A stop string anywhere in what is held ends the text right before it.
  size_t first_stop = std::string::npos;
  const std::string* matched = nullptr;
  for (const auto& stop : stop_strings_) {
    size_t at = pending_.find(stop);
    if (at < first_stop) {
      first_stop = at;
      matched = &stop;
    }
  }
  size_t releasable;
  if (matched) {
    releasable = first_stop;
    stopped_ = true;
    matched_stop_ = *matched;
    delta.stopped = true;
  } else if (at_end) {
    releasable = pending_.size();
  } else {
    // Hold back the longest tail that could still grow into a stop string...
    size_t hold = 0;
    for (const auto& stop : stop_strings_) {
      for (size_t length = std::min(stop.size() - 1, pending_.size()); length > hold; --length) {
        if (pending_.compare(pending_.size() - length, length, stop, 0, length) == 0) {
          hold = length;
          break;
        }
      }
    }
    releasable = pending_.size() - hold;
    // ...and any character whose bytes have not all arrived.
    releasable = unicode::complete_prefix_length(std::string_view(pending_).substr(0, releasable));
  }
  delta.text = text::repair(std::string_view(pending_).substr(0, releasable));
  pending_.erase(0, delta.stopped ? pending_.size() : releasable);
  released_ += delta.text;
  return delta;
}

}  // namespace chatflow::engine
