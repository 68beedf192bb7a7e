// The pre-tokenizers as llama.cpp b4748 splits: every name it knows accepted, unknown names
// refused, and its particular meanings of the expressions (hand-worked expectations).
#include "framework/engine/pre_tokenizer.h"

#include <gtest/gtest.h>

#include "framework/engine/gguf_writer.h"
#include "framework/engine/tokenizer.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

using Words = std::vector<std::string>;

Words split(const std::string& name, const std::string& text) {
  return PreTokenizer(name).split(text);
}

TEST(PreTokenizer, EveryNameLlamaCppKnowsIsAccepted) {
  // From llama.cpp b4748's llama-vocab.cpp, aliases included.
  for (const char* name :
       {"default",      "llama3",         "llama-v3",     "llama-bpe",  "falcon3",
        "deepseek-llm", "deepseek-coder", "deepseek-v3",  "falcon",     "mpt",
        "starcoder",    "gpt-2",          "phi-2",        "jina-es",    "jina-de",
        "gigachat",     "jina-v1-en",     "jina-v2-es",   "jina-v2-de", "jina-v2-code",
        "roberta-bpe",  "refact",         "command-r",    "qwen2",      "deepseek-r1-qwen",
        "stablelm2",    "olmo",           "dbrx",         "smaug-bpe",  "poro-chat",
        "chatglm-bpe",  "viking",         "jais",         "tekken",     "smollm",
        "codeshell",    "bloom",          "gpt3-finnish", "exaone",     "chameleon",
        "minerva-7b",   "megrez"}) {
    std::string text = "Hello, world! 12345 日本語\n\t x";
    Words words;
    ASSERT_NO_THROW(words = split(name, text)) << name;
    std::string joined;
    for (const auto& word : words)
      joined += word;
    EXPECT_EQ(joined, text) << name << ": the words put together are the text";
  }
}

TEST(PreTokenizer, UnknownNameIsRefusedWithTheSupportedList) {
  try {
    PreTokenizer pre_tokenizer("made-up");
    FAIL() << "an unknown pre-tokenizer was accepted";
  } catch (const std::invalid_argument& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("pre-tokenizer 'made-up' is not supported (supported: "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("deepseek-v3"), std::string::npos) << message;
    EXPECT_NE(message.find("tekken"), std::string::npos) << message;
  }
}

std::string write_byte_pair_vocabulary(const std::string& name, const std::string& model,
                                       const std::string& pre) {
  GgufWriter writer;
  writer.set_string("tokenizer.ggml.model", model);
  writer.set_string("tokenizer.ggml.pre", pre);
  writer.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
  writer.set_strings("tokenizer.ggml.merges", {"a b"});
  std::string path = testing::temp_path(name);
  writer.write(path);
  return path;
}

TEST(PreTokenizer, VocabularyWithAnUnknownNameIsRefusedNamingTheFile) {
  std::string path = write_byte_pair_vocabulary("unknown-pre.gguf", "gpt2", "made-up");
  auto file = GgufFile::open(path);
  try {
    Vocabulary::from_gguf(*file);
    FAIL() << "a vocabulary with an unknown pre-tokenizer loaded";
  } catch (const GgufError& error) {
    std::string message = error.what();
    EXPECT_EQ(message.rfind(path + ": pre-tokenizer 'made-up' is not supported (supported: ", 0),
              0u)
        << message;
  }
}

TEST(PreTokenizer, UnknownTokenizerModelIsRefusedNamingIt) {
  std::string path = write_byte_pair_vocabulary("rwkv.gguf", "rwkv", "default");
  auto file = GgufFile::open(path);
  try {
    Vocabulary::from_gguf(*file);
    FAIL() << "an unknown tokenizer model loaded";
  } catch (const GgufError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("tokenizer 'rwkv' is not supported (supported: "), std::string::npos)
        << message;
    EXPECT_NE(message.find("t5 (Unigram)"), std::string::npos) << message;
  }
}

TEST(PreTokenizer, Gpt2KeepsTheLastSpaceOfARunForTheNextWord) {
  EXPECT_EQ(split("gpt-2", "Hello world's   end"), (Words{"Hello", " world", "'s", "  ", " end"}));
}

TEST(PreTokenizer, Llama3SplitsDigitsInThreesAndFoldsContractions) {
  EXPECT_EQ(split("llama3", "HE'LL 12345\n\n  x"),
            (Words{"HE", "'LL", " ", "123", "45", "\n\n", " ", " x"}));
}

TEST(PreTokenizer, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(split("gpt-2",
                  "a\xFF"
                  "b"),
            (Words{"a", "\xEF\xBF\xBD", "b"}));
}

TEST(PreTokenizer, NonAsciiWhitespaceIsWhitespace) {
  EXPECT_EQ(split("qwen2", "a\u3000\u3000b"), (Words{"a", "\u3000", "\u3000b"}));
}

TEST(PreTokenizer, TildeIsNoSymbolInLlamaCppCategories) {
  // deepseek-v3's third expression: "~" may lead a word ([^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)
  // because llama.cpp's \p{S} lists $+<=>^`| below 128 but not "~".
  EXPECT_EQ(split("deepseek-v3", "~~b"), (Words{"~", "~b"}));
}

TEST(PreTokenizer, DeepseekCoderSplitsHanRunsAndSingleDigits) {
  EXPECT_EQ(split("deepseek-coder", "ab日本12"), (Words{"ab", "日本", "1", "2"}));
}

TEST(PreTokenizer, BloomSplitsAtItsPunctuationList) {
  EXPECT_EQ(split("bloom", "one, two。three"), (Words{"one", ",", " two", "。", "three"}));
}

}  // namespace
}  // namespace chatflow::engine
