// Turns a growing sequence of generated tokens into text deltas that are safe to send: never a
// broken UTF-8 character (bytes of a character split over byte-fallback tokens are held until
// it is whole), and never text that might be the start of a stop string (held until it is
// clearly not one). When a stop string appears, the text before it is released and the stream
// stops; the stop string itself is not sent, as OpenAI does.
#pragma once

#include <string>
#include <vector>

#include "framework/engine/tokenizer.h"

namespace chatflow::engine {

class IncrementalDetokenizer {
 public:
  // `skip_special`: control tokens produce no text.
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                         bool skip_special = true);

  struct Delta {
    std::string text;      // valid UTF-8, possibly empty
    bool stopped = false;  // a stop string matched: generation should end
  };

  Delta push(TokenId token);
  // The end of generation: releases whatever is held (incomplete UTF-8 becomes U+FFFD).
  Delta finish();

  const std::string& text() const { return released_; }  // everything released so far
  // The stop string that ended the text ("" while none did): the earliest in the text, the first
  // listed of those starting there.
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  Delta release(bool at_end);

  const Tokenizer& tokenizer_;
  std::vector<std::string> stop_strings_;
  bool skip_special_;
  std::string pending_;  // bytes not yet released
  std::string released_;
  bool stopped_ = false;
  std::string matched_stop_;
};

}  // namespace chatflow::engine
