#include "framework/engine/tokenizer.h"

#include <stdexcept>

#include "framework/engine/pre_tokenizer.h"
#include "framework/engine/unicode.h"
#include "framework/engine/unigram_encoder.h"

namespace chatflow::engine {

Tokenizer::Tokenizer(std::shared_ptr<const Vocabulary> vocabulary)
    : vocabulary_(std::move(vocabulary)) {
  if (vocabulary_->model == TokenizerModel::byte_pair) {
    try {
      pre_tokenizer_ = std::make_unique<PreTokenizer>(vocabulary_->pre_tokenizer);
    } catch (const std::invalid_argument& error) {
      throw GgufError(error.what());
    }
  }
  if (vocabulary_->model == TokenizerModel::unigram)
    unigram_ = std::make_unique<UnigramEncoder>(*vocabulary_);
}

Tokenizer::~Tokenizer() = default;

namespace {

// A run of the input: either raw text or an already recognised special token.
struct Fragment {
  std::string_view text;
  TokenId token = kNoToken;
};

// C's isspace in the "C" locale, which llama.cpp strips around special tokens with.
bool is_ascii_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

// Splits raw fragments around occurrences of special tokens, longest tokens first. User-defined
// tokens always match; control and unknown tokens only where `control_allowed` says so.
template <class ControlAllowed>
std::vector<Fragment> partition_special(std::string_view text, const Vocabulary& vocabulary,
                                        ControlAllowed control_allowed) {
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({text, kNoToken});
  for (TokenId id : vocabulary.special_tokens) {
    const TokenInfo& token = vocabulary.tokens[static_cast<size_t>(id)];
    bool user_defined = token.kind == TokenKind::user_defined;
    std::vector<Fragment> next;
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      std::string_view rest = fragment.text;
      size_t searched = 0;
      size_t found;
      while ((found = rest.find(token.text, searched)) != std::string_view::npos) {
        size_t begin = static_cast<size_t>(rest.data() - text.data()) + found;
        if (!user_defined && !control_allowed(begin, begin + token.text.size())) {
          searched = found + 1;
          continue;
        }
        std::string_view before = rest.substr(0, found);
        if (token.strips_space_before) {
          while (!before.empty() && is_ascii_space(before.back()))
            before.remove_suffix(1);
        }
        if (!before.empty()) next.push_back({before, kNoToken});
        next.push_back({{}, id});
        rest.remove_prefix(found + token.text.size());
        if (token.strips_space_after) {
          while (!rest.empty() && is_ascii_space(rest.front()))
            rest.remove_prefix(1);
        }
        searched = 0;
      }
      if (!rest.empty()) next.push_back({rest, kNoToken});
    }
    fragments = std::move(next);
  }
  return fragments;
}

}  // namespace

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  return encode_with(text, add_special, parse_special, {});
}

std::vector<TokenId> Tokenizer::encode_trusted(
    std::string_view text, bool add_special,
    std::span<const std::pair<size_t, size_t>> trusted) const {
  return encode_with(text, add_special, false, trusted);
}

std::vector<TokenId> Tokenizer::encode_with(
    std::string_view text, bool add_special, bool parse_special,
    std::span<const std::pair<size_t, size_t>> trusted) const {
  const Vocabulary& vocabulary = *vocabulary_;
  std::vector<TokenId> out;
  if (add_special && vocabulary.add_bos && vocabulary.bos != kNoToken)
    out.push_back(vocabulary.bos);
  bool previous_was_special = true;  // SentencePiece adds its space before the first word
  auto control_allowed = [&](size_t begin, size_t end) {
    if (parse_special) return true;
    for (const auto& [range_begin, range_end] : trusted) {
      if (begin >= range_begin && end <= range_end) return true;
    }
    return false;
  };
  for (const Fragment& fragment : partition_special(text, vocabulary, control_allowed)) {
    if (fragment.token != kNoToken) {
      out.push_back(fragment.token);
      previous_was_special = true;
      continue;
    }
    encode_fragment(fragment.text, previous_was_special, out);
    previous_was_special = false;
  }
  if (add_special) {
    if (vocabulary.model == TokenizerModel::wordpiece && vocabulary.separator != kNoToken) {
      out.push_back(vocabulary.separator);
    } else if (vocabulary.add_eos && vocabulary.eos != kNoToken) {
      out.push_back(vocabulary.eos);
    }
  }
  return out;
}

void Tokenizer::encode_fragment(std::string_view text, bool after_special,
                                std::vector<TokenId>& out) const {
  switch (vocabulary_->model) {
    case TokenizerModel::sentencepiece: {
      // SentencePiece sees spaces as U+2581 and, by default, a space before the first word.
      std::string escaped;
      escaped.reserve(text.size() + 3);
      if (vocabulary_->add_space_prefix && after_special) escaped += "\xE2\x96\x81";
      for (char c : text) {
        if (c == ' ') {
          escaped += "\xE2\x96\x81";
        } else {
          escaped += c;
        }
      }
      encode_sentencepiece(escaped, out);
      break;
    }
    case TokenizerModel::byte_pair:
      encode_byte_pair(text, out);
      break;
    case TokenizerModel::wordpiece:
      encode_wordpiece(text, out);
      break;
    case TokenizerModel::unigram:
      unigram_->encode(text, out);
      break;
  }
}

std::string Tokenizer::piece(TokenId id, bool special) const {
  const Vocabulary& vocabulary = *vocabulary_;
  if (id < 0 || static_cast<size_t>(id) >= vocabulary.size()) {
    throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary of " +
                            std::to_string(vocabulary.size()) + " tokens");
  }
  const TokenInfo& token = vocabulary.tokens[static_cast<size_t>(id)];
  switch (token.kind) {
    case TokenKind::control:
    case TokenKind::unknown:
      return special ? token.text : std::string();
    case TokenKind::user_defined:
      return token.text;
    case TokenKind::byte:
      if (vocabulary.model == TokenizerModel::sentencepiece && token.text.size() == 6) {
        return std::string(1, static_cast<char>(std::stoi(token.text.substr(3, 2), nullptr, 16)));
      }
      break;
    default:
      break;
  }
  if (vocabulary.model == TokenizerModel::byte_pair) {
    std::string bytes;
    for (const auto& character : unicode::decode(token.text)) {
      std::string_view text(token.text.data() + character.offset, character.length);
      int byte = unicode::text_to_byte(text);
      if (byte >= 0) {
        bytes += static_cast<char>(byte);
      } else {
        bytes += text;
      }
    }
    return bytes;
  }
  std::string text;
  text.reserve(token.text.size());
  for (size_t i = 0; i < token.text.size(); ++i) {
    if (token.text.compare(i, 3, "\xE2\x96\x81") == 0) {
      text += ' ';
      i += 2;
    } else {
      text += token.text[i];
    }
  }
  return text;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool special) const {
  std::string text;
  bool strip_space =
      vocabulary_->add_space_prefix || vocabulary_->model == TokenizerModel::wordpiece;
  for (TokenId id : ids) {
    std::string part = piece(id, special);
    if (strip_space && !part.empty()) {
      if (part[0] == ' ') part.erase(0, 1);
      strip_space = false;
    }
    text += part;
  }
  return text;
}

}  // namespace chatflow::engine
