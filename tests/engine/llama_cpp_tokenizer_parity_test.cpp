// `chatflow tokenize --special` against `llama-tokenize --ids --no-bos --no-escape` (llama.cpp
// b4748, parsing special tokens as it does by default) on the same files, requiring identical
// ids: every vocabulary in ../shared/models/vocab over llama.cpp's test strings and a generated
// 100 KB mixed-script text; every pre-tokenizer name llama.cpp knows, on copies of byte-level BPE
// vocabularies with tokenizer.ggml.pre rewritten; and Unigram (t5) vocabularies built here.
// Needs LLAMA_CPP_BIN (llama.cpp's bin folder); skips without it. Copies go to a temporary
// directory (those that differ stay there).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "framework/engine/gguf_file.h"
#include "framework/engine/gguf_writer.h"
#include "framework/engine/pre_tokenizer_table.h"
#include "support/charsmap_builder.h"
#include "support/mixed_script_text.h"
#include "support/shared_data.h"
#include "support/unigram_vocabulary.h"

namespace chatflow::engine {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMixedTextBytes = 100 * 1024;

std::optional<std::string> llama_tokenize_binary() {
  const char* bin = std::getenv("LLAMA_CPP_BIN");
  if (bin == nullptr || *bin == 0) return std::nullopt;
  return (fs::path(bin) / "llama-tokenize").string();
}

#define REQUIRE_LLAMA_CPP(variable)                                                 \
  auto variable##_found = llama_tokenize_binary();                                  \
  if (!variable##_found)                                                            \
    GTEST_SKIP() << "LLAMA_CPP_BIN is not set (llama.cpp b4748's bin folder, with " \
                    "llama-tokenize); skipped";                                     \
  const std::string variable = *variable##_found

// A fresh temporary directory, removed at exit when nothing was kept in it.
fs::path work_directory() {
  struct Directory {
    fs::path path;
    Directory() {
      std::string pattern = (fs::temp_directory_path() / "chatflow-tokenize-XXXXXX").string();
      if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
      path = pattern;
    }
    ~Directory() {
      std::error_code ignored;  // a directory holding kept files stays
      fs::remove(path, ignored);
    }
  };
  static const Directory directory;
  return directory.path;
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
}

// Standard output of a shell command, and whether it exited with status 0.
std::pair<bool, std::string> run(const std::string& command) {
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return {false, "popen failed"};
  std::string output;
  char buffer[65536];
  size_t got;
  while ((got = fread(buffer, 1, sizeof buffer, pipe)) > 0)
    output.append(buffer, got);
  int status = pclose(pipe);
  return {status == 0, output};
}

std::vector<TokenId> parse_ids(const std::string& text) {
  std::vector<TokenId> ids;
  std::string numbers = text;
  std::replace_if(
      numbers.begin(), numbers.end(), [](char c) { return c == '[' || c == ']' || c == ','; }, ' ');
  std::istringstream stream(numbers);
  TokenId id;
  while (stream >> id)
    ids.push_back(id);
  return ids;
}

std::string describe_difference(const std::vector<TokenId>& expected,
                                const std::vector<TokenId>& got) {
  size_t first = 0;
  while (first < expected.size() && first < got.size() && expected[first] == got[first])
    ++first;
  auto around = [&](const std::vector<TokenId>& ids) {
    std::string text;
    size_t from = first >= 4 ? first - 4 : 0;
    for (size_t i = from; i < std::min(ids.size(), first + 8); ++i)
      text += " " + std::to_string(ids[i]);
    return text;
  };
  return "first difference at id " + std::to_string(first) + " of " +
         std::to_string(expected.size()) + "/" + std::to_string(got.size()) +
         "\n    llama.cpp:" + around(expected) + "\n    chatflow: " + around(got);
}

std::string shown(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 60)) {
    if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += "\\x" + std::to_string(static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + (text.size() > 60 ? "..." : "");
}

struct Comparison {
  size_t inputs = 0;
  std::vector<std::string> differences;
};

// Tokenizes every input with both programs (two at a time) and collects the differences.
Comparison compare(const std::string& llama_tokenize, const std::string& model,
                   const std::vector<std::string>& inputs, const std::string& label) {
  auto one = [&](size_t index) -> std::string {
    std::string input =
        (work_directory() / (label + "-" + std::to_string(index) + ".txt")).string();
    write_file(input, inputs[index]);
    auto [llama_ok, llama_out] = run("'" + llama_tokenize + "' -m '" + model + "' -f '" + input +
                                     "' --ids --no-bos --no-escape --log-disable");
    auto [ours_ok, ours_out] = run(std::string("'") + CHATFLOW_BINARY + "' tokenize --model '" +
                                   model + "' --file '" + input + "' --special");
    fs::remove(input);
    std::string where =
        label + " input " + std::to_string(index) + " \"" + shown(inputs[index]) + "\"";
    if (!llama_ok) return where + ": llama-tokenize failed: " + llama_out.substr(0, 300);
    if (!ours_ok) return where + ": chatflow tokenize failed: " + ours_out.substr(0, 300);
    auto expected = parse_ids(llama_out);
    auto got = parse_ids(ours_out);
    if (expected == got) return {};
    return where + ": " + describe_difference(expected, got);
  };
  Comparison comparison;
  comparison.inputs = inputs.size();
  for (size_t i = 0; i < inputs.size(); i += 2) {
    auto second = i + 1 < inputs.size() ? std::async(std::launch::async, one, i + 1)
                                        : std::future<std::string>();
    std::string first = one(i);
    if (!first.empty()) comparison.differences.push_back(first);
    if (second.valid()) {
      std::string result = second.get();
      if (!result.empty()) comparison.differences.push_back(result);
    }
  }
  return comparison;
}

// Failing vocabularies stay in the temporary directory for a closer look.
void expect_identical(const Comparison& comparison, const std::string& label,
                      const std::string& written_file = "") {
  if (!written_file.empty()) {
    if (comparison.differences.empty()) {
      fs::remove(written_file);
    } else {
      ADD_FAILURE() << label << ": kept " << written_file;
    }
  }
  for (size_t i = 0; i < std::min<size_t>(comparison.differences.size(), 6); ++i)
    ADD_FAILURE() << comparison.differences[i];
  EXPECT_EQ(comparison.differences.size(), 0u) << label << ": " << comparison.differences.size()
                                               << " of " << comparison.inputs << " inputs differ";
}

// CHATFLOW_PARITY_EXTRA_TEXTS=N adds N short mixed texts (other seeds) to every comparison, for
// a deeper search than the default run affords.
void add_extra_texts(std::vector<std::string>& inputs, uint64_t first_seed) {
  const char* count = std::getenv("CHATFLOW_PARITY_EXTRA_TEXTS");
  uint64_t extra = count ? std::strtoull(count, nullptr, 10) : 0;
  for (uint64_t seed = first_seed; seed < first_seed + extra; ++seed)
    inputs.push_back(testing::mixed_script_text(1500, seed));
}

// llama.cpp's test strings: every .inp beside the vocabularies, each string once.
std::vector<std::string> llama_cpp_test_strings(const fs::path& directory) {
  std::vector<std::string> strings;
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.path().extension() == ".inp") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::string contents = read_file(file.string());
    size_t start = 0;
    size_t found;
    while ((found = contents.find(separator, start)) != std::string::npos) {
      std::string text = contents.substr(start, found - start);
      if (std::find(strings.begin(), strings.end(), text) == strings.end()) strings.push_back(text);
      start = found + separator.size();
    }
  }
  return strings;
}

std::string joined(const std::vector<std::string>& strings) {
  std::string text;
  for (const auto& string : strings)
    text += string + "\n";
  return text;
}

std::vector<std::string> vocabulary_files(const fs::path& directory) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.path().extension() == ".gguf") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names;
  std::istringstream stream(list);
  std::string name;
  while (std::getline(stream, name, ',')) {
    name.erase(0, name.find_first_not_of(' '));
    names.push_back(name);
  }
  return names;
}

void add_mask_token(const GgufFile& source, GgufWriter& writer) {
  std::vector<std::string> tokens = source.find("tokenizer.ggml.tokens")->strings;
  const GgufValue* kinds = source.find("tokenizer.ggml.token_type");
  std::vector<int32_t> types(tokens.size());
  std::memcpy(types.data(), kinds->array_data, 4 * types.size());
  tokens.push_back("<mask>");
  types.push_back(static_cast<int32_t>(TokenKind::user_defined));
  writer.set_strings("tokenizer.ggml.tokens", tokens);
  writer.set_int32s("tokenizer.ggml.token_type", types);
}

TEST(LlamaCppTokenizeParity, EveryVocabularyFileOverTestStringsAndMixedText) {
  REQUIRE_LLAMA_CPP(llama_tokenize);
  CHATFLOW_REQUIRE_SHARED(directory, "models/vocab");
  auto inputs = llama_cpp_test_strings(directory);
  ASSERT_FALSE(inputs.empty()) << "no .inp test strings in " << directory;
  inputs.push_back(testing::mixed_script_text(kMixedTextBytes));
  add_extra_texts(inputs, 1000);
  size_t files = 0;
  for (const std::string& model : vocabulary_files(directory)) {
    std::string name = fs::path(model).stem().string();
    expect_identical(compare(llama_tokenize, model, inputs, name), name);
    ++files;
  }
  EXPECT_GT(files, 0u);
}

// Every name on two byte-level BPE vocabularies (GPT-2's, and DeepSeek's with CJK merges).
TEST(LlamaCppTokenizeParity, EveryPreTokenizerNameOnBytePairVocabularies) {
  REQUIRE_LLAMA_CPP(llama_tokenize);
  CHATFLOW_REQUIRE_SHARED(directory, "models/vocab");
  std::vector<std::string> inputs = {
      joined(llama_cpp_test_strings(directory)), testing::mixed_script_text(kMixedTextBytes, 2),
      "a  <mask> b\n\t<mask><mask>  c <|endoftext|>  d ~~b HE'LL 12345\n\n  x "
      "a\u3000\u3000b one, two。three ab日本12 a\xFF"
      "b <sentinel:12>IMGIMGABCZ    x"};
  add_extra_texts(inputs, 2000);
  for (const char* base : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-llm.gguf"}) {
    std::string base_path = (fs::path(directory) / base).string();
    if (!fs::exists(base_path)) {
      ADD_FAILURE() << base_path << " is missing";
      continue;
    }
    auto source = GgufFile::open(base_path);
    for (const std::string& name : split_names(supported_pre_tokenizers())) {
      GgufWriter writer;
      for (const auto& [key, value] : source->metadata())
        writer.copy(*source, key);
      writer.set_string("tokenizer.ggml.pre", name);
      // llama.cpp gives Jina v2's <mask> an LSTRIP and cannot load these names without one.
      if (name.rfind("jina-v2", 0) == 0) add_mask_token(*source, writer);
      std::string copy = (work_directory() / (name + "-" + base)).string();
      writer.write(copy);
      std::string label = name + " on " + base;
      expect_identical(compare(llama_tokenize, copy, inputs, name), label, copy);
    }
  }
}

// A Unigram vocabulary with pieces of every script the mixed text uses, scores from a fixed
// sequence, user-defined and unused pieces, and a charsmap with NFKC-like folds, whitespace
// folds, a deletion and overlapping keys.
testing::UnigramVocabularySpec sample_unigram_vocabulary(const std::string& metadata_from) {
  testing::UnigramVocabularySpec spec;
  spec.other_metadata_from = metadata_from;
  spec.pieces = {
      {"<pad>", 0, TokenKind::control},       {"</s>", 0, TokenKind::control},
      {"<unk>", 0, TokenKind::unknown},       {"<extra_id_0>", 0, TokenKind::user_defined},
      {"▁<sep>", 0, TokenKind::user_defined}, {"▁unused", -2.0f, TokenKind::unused}};
  uint64_t state = 12345;
  auto score = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return -1.0f - static_cast<float>((state >> 40) % 1000) / 100.0f;
  };
  std::vector<std::string> texts;
  for (char c = 33; c < 127; ++c)
    texts.push_back(std::string(1, c));
  for (const char* piece :
       {"▁",        "▁the",   "▁a",     "▁to",    "▁of",  "▁and",       "▁in",   "▁is",
        "th",       "he",     "in",     "er",     "an",   "re",         "on",    "at",
        "en",       "nd",     "ti",     "es",     "or",   "te",         "of",    "ed",
        "is",       "it",     "al",     "ar",     "st",   "to",         "nt",    "ng",
        "se",       "ha",     "as",     "ou",     "io",   "le",         "ve",    "co",
        "me",       "de",     "hi",     "ri",     "ro",   "ic",         "ne",    "ea",
        "ra",       "ce",     "▁Hello", "▁world", "ello", "orld",       "▁t",    "▁w",
        "▁H",       "▁I",     "'s",     "n't",    "▁don", "▁tokenizer", "token", "izer",
        "▁quick",   "▁brown", "▁fox",   "▁jump",  "s",    "▁fi",        "fi",    "ne",
        "▁café",    "é",      "ï",      "ß",      "ö",    "ü",          "ñ",     "å",
        "日本",     "日",     "本",     "語",     "中文", "字",         "符",    "漢",
        "ひらがな", "ひ",     "ら",     "が",     "な",   "カタカナ",   "カ",    "タ",
        "ナ",       "한국어", "한",     "국",     "어",   "مرحبا",      "م",     "ر",
        "ح",        "ب",      "ا",      "नमस्ते",   "न",    "म",          "स",     "्",
        "ते",        "🎉",      "😀",      "🦙",   "👍",    "❤",          "▁1",    "▁12",
        "12",       "123",    "00",     "▁▁",     "▁▁▁▁", "{",          "}",     "();",
        "▁return",  "▁int",   "▁for",   "▁if",    "\t",   "\n"}) {
    texts.push_back(piece);
  }
  // llama.cpp refuses a vocabulary that lists a text twice.
  std::set<std::string> seen;
  for (const auto& piece : spec.pieces)
    seen.insert(piece.text);
  for (const auto& text : texts) {
    if (seen.insert(text).second) spec.pieces.push_back({text, score()});
  }
  spec.precompiled_charsmap = testing::build_precompiled_charsmap({
      {"\xEF\xAC\x81", "fi"},                // ﬁ
      {"\xEF\xBC\xA6", "F"},                 // Ｆ
      {"\xEF\xBD\x95", "u"},                 // ｕ
      {"\xEF\xBD\x8C", "l"},                 // ｌ
      {"\xC2\xA0", " "},                     // no-break space
      {"\xE3\x80\x80", " "},                 // ideographic space
      {"\t", " "},                           //
      {"\n", " "},                           //
      {"\xE2\x80\x8B", ""},                  // zero-width space: deleted
      {"e\xCC\x81", "\xC3\xA9"},             // e + combining acute: é
      {"\xE2\x85\xAB", "XII"},               // Ⅻ
      {"\xC7\x85", "D\xC5\xBE"},             // ǅ
      {"\xEF\xBD\xB6\xEF\xBE\x80", "カタ"},  // ｶﾀ as one key
      {"\xEF\xBD\xB6", "カ"},                // ｶ
  });
  return spec;
}

TEST(LlamaCppTokenizeParity, UnigramVocabulariesBuiltHere) {
  REQUIRE_LLAMA_CPP(llama_tokenize);
  // llama.cpp wants an architecture's hyper-parameters even for a vocabulary; the SentencePiece
  // test vocabulary lends its own.
  CHATFLOW_REQUIRE_SHARED(metadata_from, "models/vocab/ggml-vocab-llama-spm.gguf");
  CHATFLOW_REQUIRE_SHARED(directory, "models/vocab");
  auto strings = llama_cpp_test_strings(directory);
  add_extra_texts(strings, 3000);
  struct Variant {
    const char* name;
    bool add_space_prefix;
    bool remove_extra_whitespaces;
    bool charsmap;
  };
  for (Variant variant :
       {Variant{"unigram-prefix-merge", true, true, true},
        Variant{"unigram-prefix", true, false, true}, Variant{"unigram-plain", false, false, true},
        Variant{"unigram-no-charsmap", true, false, false}}) {
    auto spec = sample_unigram_vocabulary(metadata_from);
    spec.add_space_prefix = variant.add_space_prefix;
    spec.remove_extra_whitespaces = variant.remove_extra_whitespaces;
    if (!variant.charsmap) spec.precompiled_charsmap.clear();
    std::string path = (work_directory() / (std::string(variant.name) + ".gguf")).string();
    testing::write_unigram_vocabulary(path, spec);
    std::vector<std::string> inputs = strings;
    inputs.push_back(testing::mixed_script_text(kMixedTextBytes, 3));
    inputs.push_back(
        "a <extra_id_0>b ▁<sep> c\t\td  e\xE2\x80\x8B"
        "f ﬁne Ｆｕｌｌ ｶﾀｶ");
    expect_identical(compare(llama_tokenize, path, inputs, variant.name), variant.name, path);
  }
}

}  // namespace
}  // namespace chatflow::engine
