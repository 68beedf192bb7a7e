// Parity with llama.cpp's tokenizer test vectors: for every vocabulary in ../shared/models/vocab
// that has .inp/.out files, our ids equal the expected ids for every test string.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "framework/engine/tokenizer.h"
#include "support/shared_data.h"

namespace chatflow::engine {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

// The .inp format: strings separated by "\n__ggml_vocab_test__\n", with a trailing separator.
std::vector<std::string> test_strings(const std::string& path) {
  std::string contents = read_file(path);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> strings;
  size_t start = 0;
  size_t found;
  while ((found = contents.find(separator, start)) != std::string::npos) {
    strings.push_back(contents.substr(start, found - start));
    start = found + separator.size();
  }
  return strings;
}

std::vector<std::vector<TokenId>> expected_ids(const std::string& path) {
  std::ifstream file(path);
  std::vector<std::vector<TokenId>> lines;
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream numbers(line);
    std::vector<TokenId> ids;
    TokenId id;
    while (numbers >> id)
      ids.push_back(id);
    lines.push_back(std::move(ids));
  }
  return lines;
}

std::string ids_text(const std::vector<TokenId>& ids) {
  std::string text;
  for (TokenId id : ids)
    text += " " + std::to_string(id);
  return text;
}

class TokenizerParity : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerParity, MatchesLlamaCppTestVectors) {
  std::string name = std::string("models/vocab/ggml-vocab-") + GetParam() + ".gguf";
  CHATFLOW_REQUIRE_SHARED(model_path, name);
  CHATFLOW_REQUIRE_SHARED(input_path, name + ".inp");
  CHATFLOW_REQUIRE_SHARED(output_path, name + ".out");
  auto file = GgufFile::open(model_path);
  Tokenizer tokenizer(Vocabulary::from_gguf(*file));
  auto inputs = test_strings(input_path);
  auto outputs = expected_ids(output_path);
  ASSERT_EQ(inputs.size(), outputs.size()) << "test vector files disagree";
  int mismatches = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto ids = tokenizer.encode(inputs[i], /*add_special=*/false);
    if (ids != outputs[i]) {
      ++mismatches;
      ADD_FAILURE() << GetParam() << " string " << i << " \"" << inputs[i]
                    << "\"\n  expected:" << ids_text(outputs[i])
                    << "\n  got:     " << ids_text(ids);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(AllVocabularies, TokenizerParity,
                         ::testing::Values("llama-spm", "phi-3", "bert-bge", "gpt-2", "mpt",
                                           "deepseek-coder", "deepseek-llm", "falcon", "refact",
                                           "starcoder"));

}  // namespace
}  // namespace chatflow::engine
