// Every pre-tokenizer name llama.cpp b4748 accepts in tokenizer.ggml.pre, with the regular
// expressions it splits by and the tokenizer flags the name implies. The expressions are written
// as llama.cpp writes them (its own adaptations of the Hugging Face ones included), because its
// splitter gives some of them meanings of its own: PreTokenizer reproduces those.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chatflow::engine {

struct PreTokenizerFamily {
  std::vector<std::string_view> names;  // tokenizer.ggml.pre values, the first one canonical
  const std::vector<std::string>* expressions = nullptr;  // applied in sequence
  bool ignore_merges = false;  // a word that is a whole token is taken as it is
  bool add_bos = false;        // BOS by default (the metadata can still say otherwise)
  bool clean_spaces = true;    // detokenization drops the space before punctuation
  bool without_bos = false;    // the family has no BOS token (chatglm-bpe)
};

// The family `name` belongs to, or nullptr. An absent tokenizer.ggml.pre means "default".
const PreTokenizerFamily* find_pre_tokenizer(std::string_view name);

// Every accepted name, comma-separated, for error messages.
std::string supported_pre_tokenizers();

// The two expressions llama.cpp splits by hand-written code rather than by its regex engine.
extern const std::string kGpt2WordExpression;
extern const std::string kLlama3WordExpression;

}  // namespace chatflow::engine
