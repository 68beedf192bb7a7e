// Splits text into words before byte-pair encoding, as llama.cpp b4748 does for the
// pre-tokenizer named by tokenizer.ggml.pre (see pre_tokenizer_table.h). The expressions apply in
// sequence: each splits the pieces the previous one produced, and text between matches becomes a
// piece of its own. Like llama.cpp, the splitter works on code points (a byte that starts no
// valid character becomes U+FFFD), sees \p{L}, \p{N}, \p{P}, \p{S} and \p{M} through its
// simplified categories (below 128 only the ASCII sets it lists: '~' is no symbol), treats every
// Unicode White_Space character as \s, and splits the GPT-2 and Llama 3 expressions by
// hand-written rules rather than by a regex engine.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow::engine {

class PreTokenizer {
 public:
  // Throws std::invalid_argument for a pre-tokenizer name llama.cpp b4748 does not know, listing
  // the known ones.
  explicit PreTokenizer(const std::string& name);
  ~PreTokenizer();

  // The words of `text`, in order; together they are `text` with invalid bytes replaced by
  // U+FFFD.
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Step;
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace chatflow::engine
