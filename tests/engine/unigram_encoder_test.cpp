// Unigram (t5) tokenization on vocabularies written here: the charsmap's longest match, the
// normaliser's space handling, Viterbi's best total score, unknown runs as one [UNK]
// (hand-worked expectations from llama.cpp b4748's algorithm).
#include "framework/engine/unigram_encoder.h"

#include <gtest/gtest.h>

#include "framework/engine/precompiled_charsmap.h"
#include "framework/engine/tokenizer.h"
#include "support/charsmap_builder.h"
#include "support/temp_model.h"
#include "support/unigram_vocabulary.h"

namespace chatflow::engine {
namespace {

TEST(PrecompiledCharsmap, TheLongestKnownPrefixIsReplaced) {
  PrecompiledCharsmap map(testing::build_precompiled_charsmap({{"ab", "X"}, {"abc", "YY"}}));
  auto longest = map.longest_match("abcd");
  EXPECT_EQ(longest.replacement, "YY");
  EXPECT_EQ(longest.consumed, 3u);
  auto shorter = map.longest_match("abd");
  EXPECT_EQ(shorter.replacement, "X");
  EXPECT_EQ(shorter.consumed, 2u);
  EXPECT_EQ(map.longest_match("a").consumed, 0u) << "a prefix of a key is no match";
  EXPECT_EQ(map.longest_match("zz").consumed, 0u);
}

TEST(PrecompiledCharsmap, ATruncatedBlobIsRefused) {
  std::string blob = testing::build_precompiled_charsmap({{"a", "b"}});
  EXPECT_THROW(PrecompiledCharsmap(std::string_view(blob).substr(0, 100)), std::invalid_argument);
  EXPECT_THROW(PrecompiledCharsmap(std::string_view("\x01\x00", 2)), std::invalid_argument);
}

// <pad> 0, </s> 1, <unk> 2, then the pieces given.
std::shared_ptr<const Vocabulary> unigram_vocabulary(const std::string& name,
                                                     std::vector<testing::UnigramPiece> pieces,
                                                     bool add_space_prefix = true,
                                                     bool remove_extra_whitespaces = false) {
  testing::UnigramVocabularySpec spec;
  spec.pieces = {{"<pad>", 0, TokenKind::control},
                 {"</s>", 0, TokenKind::control},
                 {"<unk>", 0, TokenKind::unknown}};
  spec.pieces.insert(spec.pieces.end(), pieces.begin(), pieces.end());
  spec.precompiled_charsmap = testing::build_precompiled_charsmap({{"\xEF\xAC\x81", "fi"}});
  spec.add_space_prefix = add_space_prefix;
  spec.remove_extra_whitespaces = remove_extra_whitespaces;
  std::string path = testing::temp_path(name);
  testing::write_unigram_vocabulary(path, spec);
  return Vocabulary::from_gguf(*GgufFile::open(path));
}

const std::vector<testing::UnigramPiece> kPieces = {{"\xE2\x96\x81", -5},
                                                    {"\xE2\x96\x81"
                                                     "ab",
                                                     -1},
                                                    {"\xE2\x96\x81"
                                                     "a",
                                                     -1},
                                                    {"b", -1},
                                                    {"a", -3},
                                                    {"\xE2\x96\x81"
                                                     "fi",
                                                     -1}};
constexpr TokenId kSpace = 3, kSpaceAb = 4, kB = 6, kSpaceFi = 8, kUnknown = 2, kEos = 1;

TEST(UnigramEncoder, ChoosesTheSegmentationWithTheHighestTotalScore) {
  Tokenizer tokenizer(unigram_vocabulary("unigram-best.gguf", kPieces));
  // ▁ab (-1) beats ▁a + b (-2) and ▁ + a + b (-9).
  EXPECT_EQ(tokenizer.encode("ab", false), (std::vector<TokenId>{kSpaceAb}));
  EXPECT_EQ(tokenizer.encode("abb", false), (std::vector<TokenId>{kSpaceAb, kB}));
}

TEST(UnigramEncoder, ARunOfUnknownCharactersIsOneUnknownToken) {
  Tokenizer tokenizer(unigram_vocabulary("unigram-unknown.gguf", kPieces));
  EXPECT_EQ(tokenizer.encode("ab xyz", false), (std::vector<TokenId>{kSpaceAb, kSpace, kUnknown}));
}

TEST(UnigramEncoder, TheCharsmapNormalisesBeforeSegmenting) {
  Tokenizer tokenizer(unigram_vocabulary("unigram-charsmap.gguf", kPieces));
  EXPECT_EQ(tokenizer.encode("\xEF\xAC\x81", false), (std::vector<TokenId>{kSpaceFi}));
}

TEST(UnigramEncoder, AddsEndOfSequenceAsT5Does) {
  Tokenizer tokenizer(unigram_vocabulary("unigram-eos.gguf", kPieces));
  EXPECT_EQ(tokenizer.encode("ab", true), (std::vector<TokenId>{kSpaceAb, kEos}));
}

TEST(UnigramEncoder, SpacesBecomeU2581AndTheFirstWordGetsOneMore) {
  auto vocabulary = unigram_vocabulary("unigram-spaces.gguf", kPieces);
  UnigramEncoder encoder(*vocabulary);
  EXPECT_EQ(encoder.normalize("  a   b  "),
            "\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81"
            "a\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81"
            "b\xE2\x96\x81\xE2\x96\x81");
}

TEST(UnigramEncoder, RemovingExtraWhitespaceLeavesOneSpaceBeforeEachWord) {
  auto vocabulary = unigram_vocabulary("unigram-merge.gguf", kPieces, true, true);
  UnigramEncoder encoder(*vocabulary);
  EXPECT_EQ(encoder.normalize("  a   b  "),
            "\xE2\x96\x81"
            "a\xE2\x96\x81"
            "b");
}

TEST(UnigramEncoder, WithoutSpacePrefixOnlyWrittenSpacesAppear) {
  auto vocabulary = unigram_vocabulary("unigram-plain.gguf", kPieces, false, false);
  UnigramEncoder encoder(*vocabulary);
  EXPECT_EQ(encoder.normalize("a b"),
            "a\xE2\x96\x81"
            "b");
}

TEST(UnigramEncoder, SpacesAsASuffixGoAfterTheText) {
  Vocabulary vocabulary = *unigram_vocabulary("unigram-suffix.gguf", kPieces);
  vocabulary.treat_whitespace_as_suffix = true;
  vocabulary.escape_whitespaces = false;
  UnigramEncoder encoder(vocabulary);
  EXPECT_EQ(encoder.normalize("a b"), "a b ");
}

TEST(UnigramEncoder, InvalidBytesBecomeReplacementCharacters) {
  auto vocabulary = unigram_vocabulary("unigram-invalid.gguf", kPieces, false, false);
  UnigramEncoder encoder(*vocabulary);
  EXPECT_EQ(encoder.normalize("a\xFF"), "a\xEF\xBF\xBD");
}

}  // namespace
}  // namespace chatflow::engine
