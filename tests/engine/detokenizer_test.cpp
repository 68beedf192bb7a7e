// Incremental detokenization: whole UTF-8 characters only, SentencePiece spaces, and stop
// strings that span token boundaries.
#include "framework/engine/detokenizer.h"

#include <gtest/gtest.h>

#include "framework/engine/model.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

// The generated vocabulary has no CJK pieces: such characters are spelt with byte tokens.
std::shared_ptr<const Model> byte_level_model() {
  ModelShape shape;
  shape.layers = 1;
  return Model::load(testing::temp_model(shape));
}

std::vector<std::string> deltas_of(IncrementalDetokenizer& detokenizer,
                                   const std::vector<TokenId>& tokens) {
  std::vector<std::string> deltas;
  for (TokenId token : tokens)
    deltas.push_back(detokenizer.push(token).text);
  deltas.push_back(detokenizer.finish().text);
  return deltas;
}

TEST(IncrementalDetokenizer, ThreeByteCharacterSplitOverByteTokensComesOutWhole) {
  auto model = byte_level_model();
  const Tokenizer& tokenizer = model->tokenizer();
  std::vector<TokenId> tokens = tokenizer.encode("a你b", false);
  // "▁a", then the three bytes of 你 (E4 BD A0), then "b".
  ASSERT_EQ(tokens.size(), 5u) << "expected byte fallback for the CJK character";
  IncrementalDetokenizer detokenizer(tokenizer, {});
  auto deltas = deltas_of(detokenizer, tokens);
  EXPECT_EQ(deltas, (std::vector<std::string>{" a", "", "", "你", "b", ""}));
  EXPECT_EQ(detokenizer.text(), " a你b");
}

TEST(IncrementalDetokenizer, StopStringAcrossTokensIsHeldThenCutOut) {
  auto model = byte_level_model();
  const Tokenizer& tokenizer = model->tokenizer();
  std::vector<TokenId> tokens = tokenizer.encode("say END now", false);
  IncrementalDetokenizer detokenizer(tokenizer, {"END"});
  std::string released;
  bool stopped = false;
  for (TokenId token : tokens) {
    auto delta = detokenizer.push(token);
    EXPECT_EQ(delta.text.find('E'), std::string::npos)
        << "a possible stop prefix was released early";
    released += delta.text;
    if (delta.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(released, " say ");
  EXPECT_TRUE(detokenizer.finish().stopped);
}

// Anthropic answers which of the request's stop_sequences ended the answer.
TEST(IncrementalDetokenizer, NamesTheStopStringThatEndedTheText) {
  auto model = byte_level_model();
  const Tokenizer& tokenizer = model->tokenizer();
  IncrementalDetokenizer detokenizer(tokenizer, {"now", "", "ND", "END"});
  EXPECT_EQ(detokenizer.matched_stop(), "");
  std::string released;
  for (TokenId token : tokenizer.encode("say END now", false)) {
    auto delta = detokenizer.push(token);
    released += delta.text;
    if (delta.stopped) break;
  }
  EXPECT_EQ(released, " say ");
  // The earliest in the text ends it, whatever the order listed.
  EXPECT_EQ(detokenizer.matched_stop(), "END");
}

TEST(IncrementalDetokenizer, HeldPrefixIsReleasedWhenItTurnsOutNotToBeAStop) {
  auto model = byte_level_model();
  const Tokenizer& tokenizer = model->tokenizer();
  IncrementalDetokenizer detokenizer(tokenizer, {"ENDING"});
  std::vector<TokenId> tokens = tokenizer.encode("THE END.", false);
  ASSERT_EQ(tokenizer.piece(tokens.back()), ".");
  std::string released;
  for (size_t i = 0; i + 1 < tokens.size(); ++i)
    released += detokenizer.push(tokens[i]).text;
  EXPECT_EQ(released, " THE ") << "\"END\" could still grow into \"ENDING\"";
  released += detokenizer.push(tokens.back()).text;
  EXPECT_EQ(released, " THE END.") << "\"END.\" cannot: it is released";
  EXPECT_EQ(detokenizer.finish().text, "");
}

TEST(IncrementalDetokenizer, IncompleteCharacterAtTheEndBecomesReplacementCharacter) {
  auto model = byte_level_model();
  const Tokenizer& tokenizer = model->tokenizer();
  std::vector<TokenId> tokens = tokenizer.encode("你", false);
  ASSERT_EQ(tokens.size(), 4u);  // "▁" and three bytes
  IncrementalDetokenizer detokenizer(tokenizer, {});
  detokenizer.push(tokens[0]);
  detokenizer.push(tokens[1]);
  EXPECT_EQ(detokenizer.finish().text, "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace chatflow::engine
