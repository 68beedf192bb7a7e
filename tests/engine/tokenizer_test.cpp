// Tokenizer behaviour beyond the parity vectors: round trips, special tokens, byte fallback.
#include <gtest/gtest.h>

#include "framework/engine/model.h"
#include "support/shared_data.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

std::shared_ptr<const Model> generated_vocabulary_model() {
  ModelShape shape;
  shape.layers = 1;
  return Model::load(testing::temp_model(shape));
}

TEST(Tokenizer, DecodeReversesEncodeForAnyText) {
  auto model = generated_vocabulary_model();
  const Tokenizer& tokenizer = model->tokenizer();
  for (const std::string& text :
       {std::string("Hello, world!"), std::string("  two leading spaces"),
        std::string("tabs\tand\nnewlines\n"), std::string("日本語とemoji 🎉"),
        std::string("bytes \x01\x7F end")}) {
    auto ids = tokenizer.encode(text, false);
    EXPECT_EQ(tokenizer.decode(ids), text);
  }
}

TEST(Tokenizer, ControlTokensAreTextUnlessParsingSpecialTokens) {
  auto model = generated_vocabulary_model();
  const Tokenizer& tokenizer = model->tokenizer();
  const TokenId eos = tokenizer.vocabulary().eos;
  auto plain = tokenizer.encode("a</s>b", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eos), 0);
  auto special = tokenizer.encode("a</s>b", false, true);
  EXPECT_EQ(std::count(special.begin(), special.end(), eos), 1);
  EXPECT_EQ(tokenizer.piece(eos), "") << "control tokens print nothing by default";
  EXPECT_EQ(tokenizer.piece(eos, true), "</s>");
}

TEST(Tokenizer, AddSpecialPutsBosFirst) {
  auto model = generated_vocabulary_model();
  const Tokenizer& tokenizer = model->tokenizer();
  auto ids = tokenizer.encode("x", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), tokenizer.vocabulary().bos);
}

TEST(Tokenizer, PieceOfAnIdOutsideTheVocabularyThrows) {
  auto model = generated_vocabulary_model();
  EXPECT_THROW(model->tokenizer().piece(100000), std::out_of_range);
  EXPECT_THROW(model->tokenizer().piece(-1), std::out_of_range);
}

TEST(Tokenizer, WordPieceUnknownWordBecomesUnk) {
  CHATFLOW_REQUIRE_SHARED(path, "models/vocab/ggml-vocab-bert-bge.gguf");
  auto file = GgufFile::open(path);
  Tokenizer tokenizer(Vocabulary::from_gguf(*file));
  auto ids = tokenizer.encode("hello \xF0\x9F\x98\x80\xF0\x9F\x98\x80", false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[1], tokenizer.vocabulary().unknown);
}

}  // namespace
}  // namespace chatflow::engine
