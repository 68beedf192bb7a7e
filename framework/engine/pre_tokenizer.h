// Splits text into words before byte-pair encoding, with the regular expressions each model
// family's tokenizer uses (chosen by tokenizer.ggml.pre). Like the Hugging Face tokenizers, the
// expressions apply in sequence: each splits the pieces the previous one produced, and text
// between matches becomes a piece of its own.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace chatflow::engine {

class PreTokenizer {
 public:
  // Throws std::invalid_argument for a pre-tokenizer name this build does not know.
  explicit PreTokenizer(const std::string& name);
  ~PreTokenizer();

  // Byte ranges of `text`, in order, covering it entirely.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Pattern;
  std::vector<std::unique_ptr<Pattern>> patterns_;
};

}  // namespace chatflow::engine
