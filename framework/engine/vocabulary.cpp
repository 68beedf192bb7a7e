#include "framework/engine/vocabulary.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "framework/engine/pre_tokenizer_table.h"
#include "framework/engine/unicode.h"

namespace chatflow::engine {
namespace {

std::optional<TokenId> optional_id(const GgufFile& file, const std::string& key,
                                   size_t vocabulary_size) {
  auto value = file.get_unsigned_or(key);
  // 0xFFFFFFFF (-1 written as uint32) means "no such token".
  if (!value || *value >= vocabulary_size) return std::nullopt;
  return static_cast<TokenId>(*value);
}

// The model type and what llama.cpp assumes for it when the metadata says nothing more.
void apply_model_defaults(const GgufFile& file, Vocabulary& v) {
  v.model_name = file.get_string("tokenizer.ggml.model");
  if (v.model_name == "llama") {
    v.model = TokenizerModel::sentencepiece;
    v.bos = 1;
    v.eos = 2;
    v.unknown = 0;
    v.add_bos = true;
    v.add_space_prefix = true;
  } else if (v.model_name == "gpt2") {
    v.model = TokenizerModel::byte_pair;
    v.clean_spaces = true;
  } else if (v.model_name == "bert") {
    v.model = TokenizerModel::wordpiece;
    v.bos = 101;
    v.unknown = 100;
    v.separator = 102;
    v.padding = 0;
    v.add_bos = true;
    v.clean_spaces = true;
  } else if (v.model_name == "t5") {
    v.model = TokenizerModel::unigram;
    v.eos = 1;
    v.unknown = 2;
    v.padding = 0;
    v.add_eos = true;
  } else {
    throw GgufError(file.path() + ": tokenizer '" + v.model_name +
                    "' is not supported (supported: llama (SentencePiece), gpt2 (byte-level BPE), "
                    "bert (WordPiece), t5 (Unigram))");
  }
}

// The BPE flags that llama.cpp derives from the pre-tokenizer's name; an unknown name is refused
// rather than split some other way.
void apply_pre_tokenizer_flags(const GgufFile& file, Vocabulary& v) {
  const PreTokenizerFamily* family = find_pre_tokenizer(v.pre_tokenizer);
  if (family == nullptr) {
    throw GgufError(file.path() + ": pre-tokenizer '" + v.pre_tokenizer +
                    "' is not supported (supported: " + supported_pre_tokenizers() + ")");
  }
  v.ignore_merges = family->ignore_merges;
  if (family->add_bos) v.add_bos = true;
  v.clean_spaces = family->clean_spaces;
  if (family->without_bos) v.bos = kNoToken;
}

// Unigram's normaliser: the precompiled character map, kept as its bytes.
void read_unigram_settings(const GgufFile& file, Vocabulary& v) {
  if (const GgufValue* map = file.find("tokenizer.ggml.precompiled_charsmap")) {
    if (!map->is_array_of(GgufValueType::uint8) && !map->is_array_of(GgufValueType::int8)) {
      throw GgufError(file.path() +
                      ": tokenizer.ggml.precompiled_charsmap must be an array of bytes, got " +
                      map->describe());
    }
    v.precompiled_charsmap.assign(reinterpret_cast<const char*>(map->array_data),
                                  static_cast<size_t>(map->array_count));
  }
  if (auto remove = file.get_bool_or("tokenizer.ggml.remove_extra_whitespaces"))
    v.remove_extra_whitespaces = *remove;
}

// Explicit special-token ids and flags in the metadata override the model's defaults.
void apply_metadata_overrides(const GgufFile& file, Vocabulary& v) {
  size_t size = v.tokens.size();
  auto override_id = [&](const char* key, TokenId& target) {
    if (file.find(key) == nullptr) return;
    auto id = optional_id(file, key, size);
    target = id.value_or(kNoToken);
  };
  override_id("tokenizer.ggml.bos_token_id", v.bos);
  override_id("tokenizer.ggml.eos_token_id", v.eos);
  override_id("tokenizer.ggml.unknown_token_id", v.unknown);
  override_id("tokenizer.ggml.seperator_token_id", v.separator);
  override_id("tokenizer.ggml.padding_token_id", v.padding);
  override_id("tokenizer.ggml.eot_token_id", v.end_of_turn);
  if (auto add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token")) v.add_bos = *add_bos;
  if (auto add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token")) v.add_eos = *add_eos;
  if (auto add_prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix"))
    v.add_space_prefix = *add_prefix;
  if (v.bos != kNoToken && static_cast<size_t>(v.bos) >= size) v.bos = kNoToken;
}

// Chat models mark the end of a turn with tokens the metadata often does not name.
void collect_end_of_generation(Vocabulary& v) {
  for (const char* text : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                           "<|eom_id|>", "<EOT>"}) {
    if (auto id = v.find(text)) {
      v.end_of_generation.insert(*id);
      if (v.end_of_turn == kNoToken && std::string_view(text) != "<|eom_id|>") v.end_of_turn = *id;
      v.tokens[*id].kind = TokenKind::control;
    }
  }
  if (v.eos != kNoToken) v.end_of_generation.insert(v.eos);
  if (v.end_of_turn != kNoToken) v.end_of_generation.insert(v.end_of_turn);
}

// Fill-in-the-middle tokens that llama.cpp recognises by their text (where the metadata names
// none) become control tokens; the padding, repository and file-separator ones also end
// generation.
void mark_fill_in_middle_tokens(const GgufFile& file, Vocabulary& v) {
  struct Role {
    std::vector<const char*> keys;
    std::vector<const char*> texts;
    bool ends_generation;
  };
  const Role roles[] = {
      {{"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
       {"<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>"},
       false},
      {{"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
       {"<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>"},
       false},
      {{"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
       {"<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>"},
       false},
      {{"tokenizer.ggml.fim_pad_token_id"}, {"<|fim_pad|>", "<fim-pad>", "<PAD>"}, true},
      {{"tokenizer.ggml.fim_rep_token_id"},
       {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"},
       true},
      {{"tokenizer.ggml.fim_sep_token_id"}, {"<|file_sep|>"}, true},
  };
  for (const Role& role : roles) {
    std::optional<TokenId> id;
    for (const char* key : role.keys) {
      if (!id) id = optional_id(file, key, v.tokens.size());
    }
    if (!id) {
      for (const char* text : role.texts) {
        if ((id = v.find(text))) {
          v.tokens[*id].kind = TokenKind::control;
          break;
        }
      }
    }
    if (id && role.ends_generation) v.end_of_generation.insert(*id);
  }
}

// llama.cpp's per-model whitespace stripping around special tokens, which GGUF does not store.
void apply_strip_attributes(const GgufFile& file, Vocabulary& v) {
  auto contains_any = [](const std::string& text, std::initializer_list<const char*> parts) {
    for (const char* part : parts) {
      if (text.find(part) != std::string::npos) return true;
    }
    return false;
  };
  std::string model_name = file.get_string_or("general.name").value_or("");
  for (char& c : model_name)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (contains_any(v.pre_tokenizer, {"jina-v2-de", "jina-v2-es", "jina-v2-code"})) {
    if (auto mask = v.find("<mask>")) v.tokens[*mask].strips_space_before = true;
  } else if (contains_any(model_name, {"phi-3", "phi3"})) {
    for (TokenId id : v.special_tokens)
      v.tokens[id].strips_space_after = true;
    if (auto id = v.find("</s>")) v.tokens[*id].strips_space_after = true;
    for (const char* text : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (auto id = v.find(text)) v.tokens[*id].strips_space_after = false;
    }
  }
}

// Longest first, so that a special token is matched before any shorter one it starts with.
void collect_special_tokens(Vocabulary& v) {
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    TokenKind kind = v.tokens[i].kind;
    if (kind == TokenKind::control || kind == TokenKind::user_defined ||
        kind == TokenKind::unknown) {
      v.special_tokens.push_back(static_cast<TokenId>(i));
    }
  }
  std::stable_sort(v.special_tokens.begin(), v.special_tokens.end(), [&](TokenId a, TokenId b) {
    return v.tokens[a].text.size() > v.tokens[b].text.size();
  });
}

}  // namespace

void Vocabulary::read_tokens(const GgufFile& file) {
  const GgufValue* texts = file.find("tokenizer.ggml.tokens");
  if (texts == nullptr || !texts->is_array_of(GgufValueType::string)) {
    throw GgufError(file.path() + ": tokenizer.ggml.tokens (an array of strings) is missing");
  }
  size_t count = texts->strings.size();
  if (count == 0) throw GgufError(file.path() + ": tokenizer.ggml.tokens is empty");
  const GgufValue* scores = file.find("tokenizer.ggml.scores");
  if (scores && (!scores->is_array_of(GgufValueType::float32) || scores->array_count != count)) {
    throw GgufError(file.path() + ": tokenizer.ggml.scores must be " + std::to_string(count) +
                    " float32 values, got " + scores->describe());
  }
  const GgufValue* kinds = file.find("tokenizer.ggml.token_type");
  if (kinds && (!kinds->is_array_of(GgufValueType::int32) || kinds->array_count != count)) {
    throw GgufError(file.path() + ": tokenizer.ggml.token_type must be " + std::to_string(count) +
                    " int32 values, got " + kinds->describe());
  }
  tokens.resize(count);
  for (size_t i = 0; i < count; ++i) {
    TokenInfo& token = tokens[i];
    token.text = texts->strings[i];
    if (token.text.empty()) token.text = "[EMPTY_" + std::to_string(i) + "]";
    if (scores) std::memcpy(&token.score, scores->array_data + 4 * i, 4);
    if (kinds) {
      int32_t kind = 0;
      std::memcpy(&kind, kinds->array_data + 4 * i, 4);
      token.kind = kind >= 1 && kind <= 6 ? static_cast<TokenKind>(kind) : TokenKind::undefined;
    }
    ids_[token.text] = static_cast<TokenId>(i);
    max_token_bytes = std::max(max_token_bytes, token.text.size());
  }
}

void Vocabulary::read_merges(const GgufFile& file) {
  const GgufValue* merges = file.find("tokenizer.ggml.merges");
  if (merges == nullptr || !merges->is_array_of(GgufValueType::string)) {
    throw GgufError(file.path() +
                    ": a gpt2 tokenizer needs tokenizer.ggml.merges (an array of strings)");
  }
  for (size_t i = 0; i < merges->strings.size(); ++i) {
    const std::string& merge = merges->strings[i];
    // The separator is the first space after the first character (a merge may start with a
    // space-like symbol).
    size_t space = merge.find(' ', 1);
    if (space == std::string::npos) continue;
    merge_ranks_.emplace(merge, static_cast<int>(i));
  }
}

std::shared_ptr<const Vocabulary> Vocabulary::from_gguf(const GgufFile& file) {
  auto vocabulary = std::make_shared<Vocabulary>();
  Vocabulary& v = *vocabulary;
  apply_model_defaults(file, v);
  v.pre_tokenizer = file.get_string_or("tokenizer.ggml.pre").value_or("");
  if (v.pre_tokenizer.empty()) v.pre_tokenizer = "default";
  v.read_tokens(file);
  if (v.model == TokenizerModel::byte_pair) {
    v.read_merges(file);
    apply_pre_tokenizer_flags(file, v);
  }
  if (v.model == TokenizerModel::unigram) read_unigram_settings(file, v);
  apply_metadata_overrides(file, v);
  mark_fill_in_middle_tokens(file, v);
  collect_end_of_generation(v);
  collect_special_tokens(v);
  apply_strip_attributes(file, v);
  return vocabulary;
}

std::optional<TokenId> Vocabulary::find(std::string_view text) const {
  auto found = ids_.find(std::string(text));
  if (found == ids_.end()) return std::nullopt;
  return found->second;
}

int Vocabulary::merge_rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left).append(1, ' ').append(right);
  auto found = merge_ranks_.find(key);
  return found == merge_ranks_.end() ? -1 : found->second;
}

std::optional<TokenId> Vocabulary::byte_token(uint8_t byte) const {
  if (model == TokenizerModel::sentencepiece) {
    static const char* kHex = "0123456789ABCDEF";
    const char name[7] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>', 0};
    if (auto id = find(name)) return id;
    return find(std::string(1, static_cast<char>(byte)));
  }
  return find(unicode::byte_to_text(byte));
}

bool Vocabulary::is_special(TokenId id) const {
  TokenKind kind = tokens[static_cast<size_t>(id)].kind;
  return kind == TokenKind::control || kind == TokenKind::unknown;
}

}  // namespace chatflow::engine
