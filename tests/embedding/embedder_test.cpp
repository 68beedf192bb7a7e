#include "framework/embedding/embedder.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/embedding/hf_tokenizer.h"
#include "support/shared_data.h"

namespace chatflow::embedding {
namespace {

std::vector<double> expected_vector(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  boost::json::value document = boost::json::parse(text.str());
  std::vector<double> values;
  for (const auto& value : document.as_array().at(0).as_array())
    values.push_back(value.to_number<double>());
  return values;
}

std::string hellos(int count) {
  std::string text;
  for (int i = 0; i < count; ++i)
    text += (i ? " " : "") + std::string("hello");
  return text;
}

void expect_close(const std::vector<float>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 1e-5) << "dimension " << i;
}

// The reference outputs come from the Python model2vec package (see ../shared's SOURCE.txt).
TEST(Model2Vec, MatchesTheReferenceOnTheFloat32Model) {
  CHATFLOW_REQUIRE_SHARED(model, "models/embedding/model2vec-test-float32/model.safetensors");
  CHATFLOW_REQUIRE_SHARED(short_expected, "models/embedding/expected/embeddings_short.json");
  CHATFLOW_REQUIRE_SHARED(long_expected, "models/embedding/expected/embeddings_long.json");
  auto embedder = load_model2vec(std::filesystem::path(model).parent_path().string());
  EXPECT_EQ(embedder->dimensions(), 2u);
  expect_close(embedder->embed("hello world"), expected_vector(short_expected));
  expect_close(embedder->embed(hellos(1000)), expected_vector(long_expected));
}

TEST(Model2Vec, MatchesTheReferenceOnTheVocabularyQuantizedModel) {
  CHATFLOW_REQUIRE_SHARED(model,
                          "models/embedding/model2vec-test-vocab-quantized/model.safetensors");
  CHATFLOW_REQUIRE_SHARED(expected, "models/embedding/expected/embeddings_vocab_quantized.json");
  auto embedder = load_model2vec(std::filesystem::path(model).parent_path().string());
  EXPECT_EQ(embedder->dimensions(), 64u);
  expect_close(embedder->embed(hellos(1000)), expected_vector(expected));
}

TEST(HfTokenizer, WordPieceSplitsAsBertDoes) {
  CHATFLOW_REQUIRE_SHARED(tokenizer_file, "models/embedding/model2vec-test-float32/tokenizer.json");
  auto tokenizer = HfTokenizer::load(tokenizer_file);
  // The ids of these tokens in the file's own vocabulary, read directly from it.
  std::ifstream file(tokenizer_file);
  std::stringstream text;
  text << file.rdbuf();
  boost::json::value document = boost::json::parse(text.str());
  const auto& vocab = document.at("model").at("vocab").as_object();
  auto id = [&](const char* token) { return static_cast<int32_t>(vocab.at(token).as_int64()); };
  // Accents stripped, case folded, punctuation split off.
  EXPECT_EQ(tokenizer->encode("Héllo, WORLD!"),
            (std::vector<int32_t>{id("hello"), id(","), id("world"), id("!")}));
  EXPECT_EQ(tokenizer->encode("[UNK]"), (std::vector<int32_t>{id("[UNK]")}));
  EXPECT_EQ(tokenizer->encode("ab☃cd"), (std::vector<int32_t>{id("[UNK]")}))
      << "a word no pieces cover is one unknown token";
}

TEST(NgramEmbedder, ParaphrasesAreCloserThanOtherQuestions) {
  auto embedder = make_ngram_embedder(256, 3);
  auto question = embedder->embed("How do I reset my router password?");
  auto paraphrase = embedder->embed("how do i reset the password of my router");
  auto other = embedder->embed("What is the boiling point of water at sea level?");
  EXPECT_NEAR(dot(question, question), 1.0f, 1e-5);
  EXPECT_GT(dot(question, paraphrase), 0.6f);
  EXPECT_LT(dot(question, other), 0.3f);
  EXPECT_GT(dot(question, paraphrase), dot(question, other) + 0.4f);
  EXPECT_EQ(embedder->embed(""), std::vector<float>(256, 0.0f));
}

}  // namespace
}  // namespace chatflow::embedding
