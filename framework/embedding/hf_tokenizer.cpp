#include "framework/embedding/hf_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <boost/json.hpp>
#include <re2/re2.h>
#include <utf8proc.h>

#include "framework/text/bert_words.h"
#include "framework/text/utf8.h"

namespace chatflow::embedding {
namespace json = boost::json;
namespace {

using Codepoints = std::u32string;

using text::to_utf8;

bool is_whitespace(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
         utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ZS;
}

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_CC || category == UTF8PROC_CATEGORY_CF ||
         category == UTF8PROC_CATEGORY_CN || category == UTF8PROC_CATEGORY_CO;
}

std::string unicode_form(const std::string& text, int options) {
  utf8proc_uint8_t* result = nullptr;
  auto length = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                             static_cast<utf8proc_ssize_t>(text.size()), &result,
                             static_cast<utf8proc_option_t>(options));
  if (length < 0) return text;
  std::string out(reinterpret_cast<char*>(result), static_cast<size_t>(length));
  std::free(result);
  return out;
}

std::string strip_accents(const std::string& text) {
  Codepoints decomposed =
      text::to_code_points(unicode_form(text, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
  Codepoints kept;
  for (char32_t c : decomposed) {
    if (utf8proc_category(static_cast<utf8proc_int32_t>(c)) != UTF8PROC_CATEGORY_MN) kept += c;
  }
  return to_utf8(kept);
}

std::string lowercase(const std::string& text) {
  Codepoints characters = text::to_code_points(text);
  for (char32_t& c : characters)
    c = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  return to_utf8(characters);
}

using Normalizer = std::function<std::string(std::string)>;
using PreTokenizer = std::function<std::vector<std::string>(std::vector<std::string>)>;

[[noreturn]] void unsupported(const std::string& what) {
  throw std::runtime_error(what);
}

Normalizer make_normalizer(const json::value& spec);

Normalizer make_sequence_normalizer(const json::object& object) {
  std::vector<Normalizer> steps;
  for (const auto& step : object.at("normalizers").as_array())
    steps.push_back(make_normalizer(step));
  return [steps](std::string text) {
    for (const auto& step : steps)
      text = step(std::move(text));
    return text;
  };
}

Normalizer make_bert_normalizer(const json::object& object) {
  bool clean = object.at("clean_text").as_bool();
  bool chinese = object.at("handle_chinese_chars").as_bool();
  bool lower = object.at("lowercase").as_bool();
  const json::value& accents = object.at("strip_accents");
  bool strip = accents.is_null() ? lower : accents.as_bool();
  return [clean, chinese, strip, lower](std::string text) {
    Codepoints in = text::to_code_points(text);
    Codepoints out;
    for (char32_t c : in) {
      if (clean) {
        if (c == 0 || c == 0xFFFD || is_control(c)) continue;
        if (is_whitespace(c)) c = ' ';
      }
      if (chinese && text::is_cjk_ideograph(c)) {
        out += ' ';
        out += c;
        out += ' ';
      } else {
        out += c;
      }
    }
    std::string result = to_utf8(out);
    if (strip) result = strip_accents(result);
    if (lower) result = lowercase(result);
    return result;
  };
}

Normalizer make_lowercase_normalizer(const json::object&) {
  return [](std::string text) { return lowercase(text); };
}

Normalizer make_strip_accents_normalizer(const json::object&) {
  return [](std::string text) { return strip_accents(text); };
}

// NFC, NFD, NFKC and NFKD differ only in utf8proc's options.
template <int kOptions>
Normalizer make_unicode_form_normalizer(const json::object&) {
  return [](std::string text) { return unicode_form(text, kOptions); };
}

Normalizer make_strip_normalizer(const json::object& object) {
  bool left = object.at("strip_left").as_bool();
  bool right = object.at("strip_right").as_bool();
  return [left, right](std::string text) {
    Codepoints characters = text::to_code_points(text);
    size_t begin = 0, end = characters.size();
    while (left && begin < end && is_whitespace(characters[begin]))
      ++begin;
    while (right && end > begin && is_whitespace(characters[end - 1]))
      --end;
    return to_utf8(characters.substr(begin, end - begin));
  };
}

Normalizer make_replace_normalizer(const json::object& object) {
  const json::object& pattern = object.at("pattern").as_object();
  std::string content(object.at("content").as_string());
  if (const json::value* literal = pattern.if_contains("String")) {
    std::string from(literal->as_string());
    return [from, content](std::string text) {
      if (from.empty()) return text;
      std::string out;
      size_t position = 0, found;
      while ((found = text.find(from, position)) != std::string::npos) {
        out.append(text, position, found - position);
        out += content;
        position = found + from.size();
      }
      out.append(text, position, std::string::npos);
      return out;
    };
  }
  auto regex = std::make_shared<re2::RE2>(std::string(pattern.at("Regex").as_string()));
  if (!regex->ok()) unsupported("Replace normalizer: bad pattern " + regex->pattern());
  // RE2 reads backslashes in the rewrite as group references; the content is literal text.
  std::string rewrite;
  for (char c : content) {
    if (c == '\\') rewrite += '\\';
    rewrite += c;
  }
  return [regex, rewrite](std::string text) {
    re2::RE2::GlobalReplace(&text, *regex, rewrite);
    return text;
  };
}

struct NormalizerType {
  std::string_view name;
  Normalizer (*make)(const json::object& spec);
};

constexpr NormalizerType kNormalizerTypes[] = {
    {"Sequence", make_sequence_normalizer},
    {"BertNormalizer", make_bert_normalizer},
    {"Lowercase", make_lowercase_normalizer},
    {"StripAccents", make_strip_accents_normalizer},
    {"NFC", make_unicode_form_normalizer<UTF8PROC_STABLE | UTF8PROC_COMPOSE>},
    {"NFD", make_unicode_form_normalizer<UTF8PROC_STABLE | UTF8PROC_DECOMPOSE>},
    {"NFKC", make_unicode_form_normalizer<UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT>},
    {"NFKD", make_unicode_form_normalizer<UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT>},
    {"Strip", make_strip_normalizer},
    {"Replace", make_replace_normalizer},
};

Normalizer make_normalizer(const json::value& spec) {
  if (spec.is_null()) return [](std::string text) { return text; };
  const json::object& object = spec.as_object();
  std::string type(object.at("type").as_string());
  for (const NormalizerType& known : kNormalizerTypes) {
    if (known.name == type) return known.make(object);
  }
  unsupported("normalizer type '" + type + "' is not supported");
}

PreTokenizer make_pre_tokenizer(const json::value& spec);

// A pre-tokenizer that splits each piece on its own with `split(piece, out)`.
template <class Split>
PreTokenizer split_each(Split split) {
  return [split](std::vector<std::string> pieces) {
    std::vector<std::string> out;
    for (const auto& piece : pieces)
      split(piece, out);
    return out;
  };
}

PreTokenizer make_sequence_pre_tokenizer(const json::object& object) {
  std::vector<PreTokenizer> steps;
  for (const auto& step : object.at("pretokenizers").as_array())
    steps.push_back(make_pre_tokenizer(step));
  return [steps](std::vector<std::string> pieces) {
    for (const auto& step : steps)
      pieces = step(std::move(pieces));
    return pieces;
  };
}

// BertPreTokenizer splits on whitespace and punctuation, WhitespaceSplit on whitespace only.
PreTokenizer make_bert_word_split(bool punctuation) {
  text::BertSplit split;
  split.is_space = is_whitespace;
  split.punctuation = punctuation;
  split.cjk = false;  // BertNormalizer has already put spaces around them
  return split_each([split](const std::string& piece, std::vector<std::string>& out) {
    for (const auto& word : text::split_bert_words(text::to_code_points(piece), split))
      out.push_back(to_utf8(word));
  });
}

PreTokenizer make_bert_pre_tokenizer(const json::object&) {
  return make_bert_word_split(true);
}

PreTokenizer make_whitespace_split_pre_tokenizer(const json::object&) {
  return make_bert_word_split(false);
}

// \w+|[^\w\s]+
void split_words_and_symbols(const std::string& piece, std::vector<std::string>& out) {
  Codepoints run;
  int kind = 0;  // 1 word, 2 other
  auto flush = [&] {
    if (!run.empty()) out.push_back(to_utf8(run));
    run.clear();
  };
  for (char32_t c : text::to_code_points(piece)) {
    auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    bool word = c == '_' ||
                (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
                (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO) ||
                (category >= UTF8PROC_CATEGORY_MN && category <= UTF8PROC_CATEGORY_ME);
    if (is_whitespace(c)) {
      flush();
      kind = 0;
      continue;
    }
    int next = word ? 1 : 2;
    if (next != kind) flush();
    kind = next;
    run += c;
  }
  flush();
}

PreTokenizer make_whitespace_pre_tokenizer(const json::object&) {
  return split_each(split_words_and_symbols);
}

// Spaces become the replacement, which is prepended per `scheme` ("always", "first" or "never");
// with `split`, each piece is then cut before every replacement, which stays with what follows.
void metaspace(const std::string& replacement, const std::string& scheme, bool split,
               const std::vector<std::string>& pieces, std::vector<std::string>& out) {
  for (size_t index = 0; index < pieces.size(); ++index) {
    std::string text;
    for (char c : pieces[index]) {
      if (c == ' ') {
        text += replacement;
      } else {
        text += c;
      }
    }
    bool prepend = scheme == "always" || (scheme == "first" && index == 0);
    if (prepend && text.rfind(replacement, 0) != 0) text = replacement + text;
    if (!split) {
      out.push_back(text);
      continue;
    }
    size_t start = 0;
    while (start < text.size()) {
      size_t next = text.find(replacement, start + 1);
      if (next == std::string::npos) next = text.size();
      out.push_back(text.substr(start, next - start));
      start = next;
    }
  }
}

PreTokenizer make_metaspace_pre_tokenizer(const json::object& object) {
  std::string replacement(object.at("replacement").as_string());
  std::string scheme = "always";
  if (const json::value* value = object.if_contains("prepend_scheme"))
    scheme = std::string(value->as_string());
  // The older add_prefix_space flag, where present, decides over prepend_scheme.
  if (const json::value* value = object.if_contains("add_prefix_space"); value && value->is_bool())
    scheme = value->as_bool() ? "always" : "never";
  bool split = true;
  if (const json::value* value = object.if_contains("split")) split = value->as_bool();
  return [replacement, scheme, split](std::vector<std::string> pieces) {
    std::vector<std::string> out;
    metaspace(replacement, scheme, split, pieces, out);
    return out;
  };
}

struct PreTokenizerType {
  std::string_view name;
  PreTokenizer (*make)(const json::object& spec);
};

constexpr PreTokenizerType kPreTokenizerTypes[] = {
    {"Sequence", make_sequence_pre_tokenizer},
    {"BertPreTokenizer", make_bert_pre_tokenizer},
    {"WhitespaceSplit", make_whitespace_split_pre_tokenizer},
    {"Whitespace", make_whitespace_pre_tokenizer},
    {"Metaspace", make_metaspace_pre_tokenizer},
};

PreTokenizer make_pre_tokenizer(const json::value& spec) {
  if (spec.is_null()) return [](std::vector<std::string> pieces) { return pieces; };
  const json::object& object = spec.as_object();
  std::string type(object.at("type").as_string());
  for (const PreTokenizerType& known : kPreTokenizerTypes) {
    if (known.name == type) return known.make(object);
  }
  unsupported("pre-tokenizer type '" + type + "' is not supported");
}

struct Added {
  std::string content;
  int32_t id;
};

class Tokenizer : public HfTokenizer {
 public:
  Tokenizer(Normalizer normalizer, PreTokenizer pre_tokenizer, std::vector<Added> added)
      : normalizer_(std::move(normalizer)),
        pre_tokenizer_(std::move(pre_tokenizer)),
        added_(std::move(added)) {}

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    // Added tokens written in the text are taken as they are; the rest is normalised.
    size_t position = 0;
    std::string segment;
    auto flush = [&] {
      if (segment.empty()) return;
      std::string normalized = normalizer_(segment);
      for (const auto& word : pre_tokenizer_({normalized}))
        encode_word(word, ids);
      segment.clear();
    };
    while (position < text.size()) {
      const Added* match = nullptr;
      for (const auto& added : added_) {
        if (!added.content.empty() &&
            text.substr(position, added.content.size()) == added.content &&
            (!match || added.content.size() > match->content.size())) {
          match = &added;
        }
      }
      if (match) {
        flush();
        ids.push_back(match->id);
        position += match->content.size();
      } else {
        segment += text[position++];
      }
    }
    flush();
    return ids;
  }

  size_t median_token_length() const override { return median_; }

 protected:
  virtual void encode_word(const std::string& word, std::vector<int32_t>& ids) const = 0;
  void set_median(std::vector<size_t> lengths) {
    if (lengths.empty()) return;
    std::sort(lengths.begin(), lengths.end());
    median_ = lengths[lengths.size() / 2];
  }

 private:
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::vector<Added> added_;
  size_t median_ = 1;
};

class WordPiece final : public Tokenizer {
 public:
  WordPiece(Normalizer normalizer, PreTokenizer pre_tokenizer, std::vector<Added> added,
            const json::object& model)
      : Tokenizer(std::move(normalizer), std::move(pre_tokenizer), std::move(added)) {
    std::vector<size_t> lengths;
    for (const auto& [token, id] : model.at("vocab").as_object()) {
      vocabulary_.emplace(std::string(token), static_cast<int32_t>(id.to_number<int64_t>()));
      lengths.push_back(token.size());
    }
    set_median(std::move(lengths));
    std::string unk(model.at("unk_token").as_string());
    auto found = vocabulary_.find(unk);
    if (found == vocabulary_.end())
      unsupported("the unknown token '" + unk + "' is not in the vocabulary");
    unk_ = found->second;
    if (const json::value* prefix = model.if_contains("continuing_subword_prefix");
        prefix && prefix->is_string())
      prefix_ = std::string(prefix->as_string());
    if (const json::value* limit = model.if_contains("max_input_chars_per_word"))
      max_chars_ = limit->to_number<size_t>();
  }

  int32_t unk_id() const override { return unk_; }
  size_t vocabulary_size() const override { return vocabulary_.size(); }

 private:
  void encode_word(const std::string& word, std::vector<int32_t>& ids) const override {
    Codepoints characters = text::to_code_points(word);
    if (characters.size() > max_chars_) {
      ids.push_back(unk_);
      return;
    }
    std::vector<int32_t> pieces;
    size_t start = 0;
    while (start < characters.size()) {
      size_t end = characters.size();
      int32_t found = -1;
      while (end > start) {
        std::string candidate =
            (start > 0 ? prefix_ : "") + to_utf8(characters.substr(start, end - start));
        if (auto hit = vocabulary_.find(candidate); hit != vocabulary_.end()) {
          found = hit->second;
          break;
        }
        --end;
      }
      if (found < 0) {
        ids.push_back(unk_);  // one unknown piece makes the whole word unknown
        return;
      }
      pieces.push_back(found);
      start = end;
    }
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }

  std::unordered_map<std::string, int32_t> vocabulary_;
  int32_t unk_ = -1;
  std::string prefix_ = "##";
  size_t max_chars_ = 100;
};

class Unigram final : public Tokenizer {
 public:
  Unigram(Normalizer normalizer, PreTokenizer pre_tokenizer, std::vector<Added> added,
          const json::object& model)
      : Tokenizer(std::move(normalizer), std::move(pre_tokenizer), std::move(added)) {
    std::vector<size_t> lengths;
    double min_score = std::numeric_limits<double>::max();
    const json::array& vocab = model.at("vocab").as_array();
    for (size_t id = 0; id < vocab.size(); ++id) {
      const json::array& entry = vocab[id].as_array();
      std::string piece(entry.at(0).as_string());
      double score = entry.at(1).to_number<double>();
      pieces_.emplace(piece, std::make_pair(static_cast<int32_t>(id), score));
      max_piece_chars_ = std::max(max_piece_chars_, text::to_code_points(piece).size());
      lengths.push_back(piece.size());
      min_score = std::min(min_score, score);
    }
    set_median(std::move(lengths));
    size_ = vocab.size();
    if (const json::value* unk = model.if_contains("unk_id"); unk && !unk->is_null())
      unk_ = static_cast<int32_t>(unk->to_number<int64_t>());
    unk_score_ =
        min_score - 10.0;  // as the reference: an unknown character costs more than any piece
  }

  int32_t unk_id() const override { return unk_; }
  size_t vocabulary_size() const override { return size_; }

 private:
  // Viterbi: the segmentation with the highest total score.
  void encode_word(const std::string& word, std::vector<int32_t>& ids) const override {
    Codepoints characters = text::to_code_points(word);
    size_t n = characters.size();
    std::vector<double> best(n + 1, -std::numeric_limits<double>::infinity());
    std::vector<size_t> from(n + 1, 0);
    std::vector<int32_t> token(n + 1, -1);
    best[0] = 0;
    for (size_t start = 0; start < n; ++start) {
      if (best[start] == -std::numeric_limits<double>::infinity()) continue;
      bool single = false;
      for (size_t length = 1; length <= max_piece_chars_ && start + length <= n; ++length) {
        auto found = pieces_.find(to_utf8(characters.substr(start, length)));
        if (found == pieces_.end()) continue;
        single = single || length == 1;
        double score = best[start] + found->second.second;
        if (score > best[start + length]) {
          best[start + length] = score;
          from[start + length] = start;
          token[start + length] = found->second.first;
        }
      }
      if (!single) {
        double score = best[start] + unk_score_;
        if (score > best[start + 1]) {
          best[start + 1] = score;
          from[start + 1] = start;
          token[start + 1] = unk_;
        }
      }
    }
    std::vector<int32_t> path;
    for (size_t end = n; end > 0; end = from[end])
      path.push_back(token[end]);
    // Runs of unknown characters become one unknown token, as the reference fuses them.
    int32_t previous = -2;
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      if (*it == unk_ && previous == unk_) continue;
      ids.push_back(*it);
      previous = *it;
    }
  }

  std::unordered_map<std::string, std::pair<int32_t, double>> pieces_;
  size_t max_piece_chars_ = 1;
  size_t size_ = 0;
  int32_t unk_ = -1;
  double unk_score_ = 0;
};

}  // namespace

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(path + ": cannot open");
  std::stringstream text;
  text << file.rdbuf();
  std::error_code error;
  json::value document = json::parse(text.str(), error);
  if (error || !document.is_object()) throw std::runtime_error(path + ": not a JSON object");
  try {
    const json::object& root = document.as_object();
    Normalizer normalizer =
        make_normalizer(root.contains("normalizer") ? root.at("normalizer") : json::value());
    PreTokenizer pre = make_pre_tokenizer(root.contains("pre_tokenizer") ? root.at("pre_tokenizer")
                                                                         : json::value());
    std::vector<Added> added;
    if (const json::value* tokens = root.if_contains("added_tokens")) {
      for (const auto& token : tokens->as_array()) {
        added.push_back({std::string(token.at("content").as_string()),
                         static_cast<int32_t>(token.at("id").to_number<int64_t>())});
      }
    }
    const json::object& model = root.at("model").as_object();
    std::string type(model.at("type").as_string());
    if (type == "WordPiece")
      return std::make_unique<WordPiece>(normalizer, pre, std::move(added), model);
    if (type == "Unigram")
      return std::make_unique<Unigram>(normalizer, pre, std::move(added), model);
    throw std::runtime_error("model type '" + type + "' is not supported (WordPiece, Unigram)");
  } catch (const std::exception& failure) {
    throw std::runtime_error(path + ": " + failure.what());
  }
}

}  // namespace chatflow::embedding
