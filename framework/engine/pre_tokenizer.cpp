#include "framework/engine/pre_tokenizer.h"

#include <stdexcept>

#include <re2/re2.h>

#include "framework/engine/unicode.h"

namespace chatflow::engine {
namespace {

// The expressions, as the Hugging Face tokenizer.json files of these families write them.
const char* const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kStarcoder =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

std::vector<std::string> expressions_for(const std::string& name) {
  if (name == "gpt-2" || name == "gpt2" || name == "mpt" || name == "olmo" || name == "jais" ||
      name == "phi-2" || name == "roberta-bpe" || name == "jina-v1-en" || name == "jina-v2-es" ||
      name == "jina-v2-de" || name == "jina-v2-code" || name == "jina-es" || name == "jina-de" ||
      name == "gigachat") {
    return {kGpt2};
  }
  if (name == "llama3" || name == "llama-v3" || name == "llama-bpe" || name == "falcon3" ||
      name == "dbrx" || name == "smaug-bpe" || name == "chatglm-bpe") {
    return {kLlama3};
  }
  if (name == "qwen2" || name == "stablelm2" || name == "megrez") return {kQwen2};
  if (name == "deepseek-coder") {
    return {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
            "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", R"(\p{N})"};
  }
  if (name == "starcoder" || name == "refact" || name == "command-r" || name == "smollm" ||
      name == "codeshell" || name == "exaone" || name == "minerva-7b") {
    return {R"(\p{N})", kStarcoder};
  }
  if (name == "default") {
    return {R"([\p{P}\$\+<=>\^~\|]+)", kStarcoder, R"(\p{N}+)", R"([0-9][0-9][0-9])"};
  }
  throw std::invalid_argument(
      "pre-tokenizer '" + name +
      "' is not supported (supported: gpt-2, mpt, llama3/llama-bpe, qwen2, deepseek-coder, "
      "starcoder, default, and their aliases)");
}

// RE2's \s is ASCII only; the tokenizers mean Unicode White_Space.
const char* const kWhitespaceClass =
    R"(\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S into explicit classes, and the look-ahead \s+(?!\S), which RE2 cannot run,
// into a named group the splitter recognises and shortens by hand.
std::string to_re2(const std::string& expression, bool& has_lookahead) {
  std::string lookahead = R"(\s+(?!\S))";
  std::string source = expression;
  has_lookahead = false;
  if (size_t at = source.find(lookahead); at != std::string::npos) {
    source.replace(at, lookahead.size(), R"((?P<trailing_space>\s+))");
    has_lookahead = true;
  }
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    if (c == '\\' && i + 1 < source.size()) {
      char next = source[i + 1];
      if (next == 's') {
        out += in_class ? std::string(kWhitespaceClass) : "[" + std::string(kWhitespaceClass) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kWhitespaceClass) + "]";
      } else {
        out += c;
        out += next;
      }
      ++i;
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct PreTokenizer::Pattern {
  std::unique_ptr<re2::RE2> expression;
  int trailing_space_group = -1;  // capture group standing for \s+(?!\S), or -1
};

PreTokenizer::PreTokenizer(const std::string& name) {
  for (const auto& expression : expressions_for(name)) {
    auto pattern = std::make_unique<Pattern>();
    bool has_lookahead = false;
    re2::RE2::Options options;
    options.set_log_errors(false);
    pattern->expression = std::make_unique<re2::RE2>(to_re2(expression, has_lookahead), options);
    if (!pattern->expression->ok()) {
      throw std::logic_error("pre-tokenizer expression does not compile: " +
                             pattern->expression->error());
    }
    if (has_lookahead)
      pattern->trailing_space_group =
          pattern->expression->NamedCapturingGroups().at("trailing_space");
    patterns_.push_back(std::move(pattern));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  for (const auto& pattern : patterns_) {
    std::vector<std::string_view> next;
    next.reserve(pieces.size() * 2);
    int groups = pattern->trailing_space_group + 1;
    std::vector<re2::StringPiece> matches(static_cast<size_t>(std::max(groups, 1)));
    for (std::string_view piece : pieces) {
      re2::StringPiece input(piece.data(), piece.size());
      size_t position = 0;
      while (position < piece.size() &&
             pattern->expression->Match(input, position, piece.size(), re2::RE2::UNANCHORED,
                                        matches.data(), static_cast<int>(matches.size()))) {
        size_t begin = static_cast<size_t>(matches[0].data() - piece.data());
        size_t end = begin + matches[0].size();
        if (end == begin) {  // an empty match splits nothing; step over one character
          position = begin + unicode::sequence_length(static_cast<unsigned char>(piece[begin]));
          continue;
        }
        if (groups > 0 && matches[static_cast<size_t>(groups - 1)].data() != nullptr &&
            end < piece.size()) {
          // \s+(?!\S) followed by a non-space: the run gives its last character to the next word.
          std::string_view run = piece.substr(begin, end - begin);
          auto characters = unicode::decode(run);
          if (characters.size() > 1) end = begin + characters.back().offset;
        }
        if (begin > position) next.push_back(piece.substr(position, begin - position));
        next.push_back(piece.substr(begin, end - begin));
        position = end;
      }
      if (position < piece.size()) next.push_back(piece.substr(position));
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace chatflow::engine
