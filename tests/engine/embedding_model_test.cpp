// GGUF embedding models (framework/engine/embedding_model.h): pooling and normalisation against
// hand-computed values, the generated bert vocabulary's WordPiece tokens, bidirectional (bert)
// against causal (decoder) attention, a decoder's last hidden row against the engine's own
// reference transformer, and what is refused. Parity of the vectors with llama.cpp's
// llama-embedding is tests/parity/llama_cpp_embeddings.test.mjs.
#include "framework/engine/embedding_model.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include <gtest/gtest.h>

#include "engine/reference_transformer.h"
#include "framework/engine/model.h"
#include "framework/engine/model_writer.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

using engine::EmbeddingModel;
using engine::Pooling;
using engine::TokenId;

std::string written(const engine::ModelShape& shape, const std::string& name) {
  std::string path = temp_path(name + ".gguf");
  engine::write_random_model(shape, path);
  return path;
}

engine::ModelShape bert_shape() {
  engine::ModelShape shape;
  shape.architecture = "bert";
  shape.dim = 32;
  shape.heads = 4;
  shape.kv_heads = 4;
  shape.layers = 2;
  shape.ffn = 64;
  shape.context = 64;
  return shape;
}

engine::ModelShape decoder_shape(const std::string& pooling) {
  engine::ModelShape shape;
  shape.dim = 32;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.layers = 2;
  shape.ffn = 64;
  shape.context = 64;
  shape.pooling = pooling;
  return shape;
}

TEST(EmbeddingPooling, MeanClsAndLastOfHandWrittenRows) {
  const float rows[] = {1, 2, 3, 4, 5, 9};  // three tokens of width 2
  float out[2];
  engine::pool_rows(Pooling::mean, rows, 3, 2, out);
  EXPECT_FLOAT_EQ(out[0], 3.0f);
  EXPECT_FLOAT_EQ(out[1], 5.0f);
  engine::pool_rows(Pooling::cls, rows, 3, 2, out);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 2.0f);
  engine::pool_rows(Pooling::last, rows, 3, 2, out);
  EXPECT_FLOAT_EQ(out[0], 5.0f);
  EXPECT_FLOAT_EQ(out[1], 9.0f);
  EXPECT_THROW(engine::pool_rows(Pooling::mean, rows, 0, 2, out), std::length_error);
}

TEST(EmbeddingPooling, NormalisationToUnitLengthKeepsZeros) {
  std::vector<float> vector{3, 4};
  engine::normalize_l2(vector);
  EXPECT_FLOAT_EQ(vector[0], 0.6f);
  EXPECT_FLOAT_EQ(vector[1], 0.8f);
  std::vector<float> zeros{0, 0};
  engine::normalize_l2(zeros);
  EXPECT_EQ(zeros, (std::vector<float>{0, 0}));
}

TEST(EmbeddingPooling, NamesAreReadAndUnknownOnesRefused) {
  EXPECT_EQ(engine::pooling_from_name("mean"), Pooling::mean);
  EXPECT_EQ(engine::pooling_from_name("cls"), Pooling::cls);
  EXPECT_EQ(engine::pooling_from_name("last"), Pooling::last);
  EXPECT_EQ(engine::pooling_from_name("auto"), Pooling::unspecified);
  EXPECT_THROW(engine::pooling_from_name("max"), std::invalid_argument);
}

// WordPiece on make-model's bert vocabulary: [CLS] and [SEP] around, lower case, punctuation
// split off, the longest piece first then continuation pieces, accents stripped, an
// unmatchable word [UNK].
TEST(EmbeddingWordPiece, GeneratedBertVocabularyTokenizesAsBert) {
  auto model = EmbeddingModel::load(written(bert_shape(), "wordpiece-bert"));
  const engine::Tokenizer& tokenizer = model->tokenizer();
  auto pieces = [&](const std::string& text) {
    std::vector<std::string> out;
    for (TokenId id : model->tokenize(text))
      out.push_back(tokenizer.vocabulary().tokens[static_cast<size_t>(id)].text);
    return out;
  };
  const std::string w = "\xE2\x96\x81";  // word-initial mark
  EXPECT_EQ(pieces("Hello, World!"), (std::vector<std::string>{"[CLS]", w + "hello", w + ",",
                                                               w + "world", w + "!", "[SEP]"}));
  EXPECT_EQ(pieces("embedding tokenizer"),
            (std::vector<std::string>{"[CLS]", w + "embed", "ding", w + "token", "izer", "[SEP]"}));
  EXPECT_EQ(pieces("Caf\xC3\xA9"),
            (std::vector<std::string>{"[CLS]", w + "c", "a", "f", "e", "[SEP]"}));
  EXPECT_EQ(pieces("cat \xE4\xB8\xAD dog"),
            (std::vector<std::string>{"[CLS]", w + "cat", "[UNK]", w + "dog", "[SEP]"}));
  // The ids llama.cpp b4748's llama-tokenize gives for the same file.
  EXPECT_EQ(model->tokenize("hello world"), (std::vector<TokenId>{2, 143, 144, 3}));
  EXPECT_EQ(model->tokenize("the weather in paris"),
            (std::vector<TokenId>{2, 141, 151, 97, 108, 149, 3}));
}

TEST(EmbeddingModelBert, EmbedIsTheFilesPoolingOfTheHiddenRowsNormalised) {
  auto model = EmbeddingModel::load(written(bert_shape(), "pooling-bert"));
  EXPECT_EQ(model->architecture(), "bert");
  EXPECT_EQ(model->pooling(), Pooling::mean);  // make-model writes bert.pooling_type 1
  EXPECT_EQ(model->dimensions(), 32);
  EXPECT_EQ(model->context(), 64);
  std::vector<TokenId> tokens = model->tokenize("hello world, the weather");
  std::vector<float> rows = model->hidden_states(tokens);
  ASSERT_EQ(rows.size(), tokens.size() * 32);
  std::vector<float> expected(32);
  double norm = 0;
  for (size_t i = 0; i < 32; ++i) {
    for (size_t t = 0; t < tokens.size(); ++t)
      expected[i] += rows[t * 32 + i];
    expected[i] /= static_cast<float>(tokens.size());
    norm += expected[i] * expected[i];
  }
  std::vector<float> vector = model->embed(tokens);
  for (size_t i = 0; i < 32; ++i)
    EXPECT_NEAR(vector[i], expected[i] / std::sqrt(norm), 1e-6) << i;
  auto cls = EmbeddingModel::load(written(bert_shape(), "pooling-bert"), Pooling::cls);
  std::vector<float> first = cls->embed(tokens);
  double first_norm = 0;
  for (size_t i = 0; i < 32; ++i)
    first_norm += rows[i] * rows[i];
  for (size_t i = 0; i < 32; ++i)
    EXPECT_NEAR(first[i], rows[i] / std::sqrt(first_norm), 1e-6) << i;
}

TEST(EmbeddingModelBert, AttentionSeesLaterTokensAndLayerNormsEachRow) {
  auto model = EmbeddingModel::load(written(bert_shape(), "bidirectional-bert"));
  std::vector<float> a = model->hidden_states(std::vector<TokenId>{2, 40, 50, 3});
  std::vector<float> b = model->hidden_states(std::vector<TokenId>{2, 40, 60, 3});
  double first_row_change = 0;
  for (size_t i = 0; i < 32; ++i)
    first_row_change += std::abs(a[i] - b[i]);
  EXPECT_GT(first_row_change, 1e-3) << "the first token's row must depend on a later token";
}

// nomic-bert has no position table: positions reach it only through the rotation of queries and
// keys, so the same tokens in another order give each token another row.
TEST(EmbeddingModelNomicBert, RotaryPositionsAndBidirectionalAttention) {
  engine::ModelShape shape = bert_shape();
  shape.architecture = "nomic-bert";
  auto model = EmbeddingModel::load(written(shape, "nomic-bert"));
  EXPECT_EQ(model->architecture(), "nomic-bert");
  EXPECT_EQ(model->pooling(), Pooling::mean);
  std::vector<float> a = model->hidden_states(std::vector<TokenId>{2, 40, 50, 3});
  std::vector<float> b = model->hidden_states(std::vector<TokenId>{2, 50, 40, 3});
  double moved = 0, first_row_change = 0;
  for (size_t i = 0; i < 32; ++i) {
    moved += std::abs(a[32 + i] - b[64 + i]);  // token 40 at position 1, then at 2
    first_row_change += std::abs(a[i] - b[i]);
  }
  EXPECT_GT(moved, 1e-3);
  EXPECT_GT(first_row_change, 1e-3);
}

TEST(EmbeddingModelDecoder, CausalRowsAndTheLastRowGivesTheReferenceTransformersLogits) {
  const std::string path = written(decoder_shape("last"), "decoder-last");
  auto model = EmbeddingModel::load(path);
  EXPECT_EQ(model->pooling(), Pooling::last);
  const std::vector<TokenId> tokens{1, 300, 301, 302, 303};
  std::vector<float> rows = model->hidden_states(tokens);
  std::vector<TokenId> changed = tokens;
  changed.back() = 310;
  std::vector<float> other = model->hidden_states(changed);
  for (size_t i = 0; i < 4 * 32; ++i)
    ASSERT_FLOAT_EQ(rows[i], other[i]) << "an earlier row moved with a later token at " << i;
  // The final-norm row times the output matrix is what the engine's reference computes as logits.
  auto decoder = engine::Model::load(path);
  ReferenceTransformer reference(*decoder);
  std::vector<float> logits;
  for (TokenId token : tokens)
    logits = reference.step(token);
  const float* last = rows.data() + 4 * 32;
  std::vector<float> output_row(32);
  for (int64_t r = 0; r < decoder->config().vocabulary; ++r) {
    engine::dequantize_row(decoder->output(), r, output_row.data());
    double logit = 0;
    for (size_t i = 0; i < 32; ++i)
      logit += double(output_row[i]) * last[i];
    ASSERT_NEAR(logit, logits[static_cast<size_t>(r)], 1e-3) << "logit " << r;
  }
}

TEST(EmbeddingModelDecoder, MeanPoolingIsTheAverageOfEveryRow) {
  auto model = EmbeddingModel::load(written(decoder_shape("mean"), "decoder-mean"));
  EXPECT_EQ(model->pooling(), Pooling::mean);
  const std::vector<TokenId> tokens{1, 300, 301};
  std::vector<float> rows = model->hidden_states(tokens);
  std::vector<float> vector = model->embed(tokens);
  double norm = 0;
  std::vector<double> mean(32);
  for (size_t i = 0; i < 32; ++i) {
    mean[i] = (rows[i] + rows[32 + i] + rows[64 + i]) / 3.0;
    norm += mean[i] * mean[i];
  }
  for (size_t i = 0; i < 32; ++i)
    EXPECT_NEAR(vector[i], mean[i] / std::sqrt(norm), 1e-6);
}

TEST(EmbeddingModelRefusals, NoPoolingInTheFileOrLongInputsOrForeignIds) {
  const std::string path = written(decoder_shape(""), "decoder-no-pooling");
  try {
    EmbeddingModel::load(path);
    FAIL() << "a decoder without pooling_type loaded";
  } catch (const engine::GgufError& error) {
    EXPECT_NE(std::string(error.what()).find("llama.pooling_type"), std::string::npos)
        << error.what();
  }
  auto model = EmbeddingModel::load(path, Pooling::mean);
  EXPECT_THROW(model->embed(std::vector<TokenId>(65, 300)), std::length_error);
  EXPECT_THROW(model->embed(std::vector<TokenId>{}), std::length_error);
  EXPECT_THROW(model->embed(std::vector<TokenId>{1, 100000}), std::out_of_range);
  // A reranker's classification head would be ignored: the file is refused naming it.
  const std::string with_head = rewritten_model(
      written(bert_shape(), "bert-for-head"), "bert-with-head.gguf",
      [](engine::GgufWriter& writer, const engine::GgufFile&) {
        std::vector<float> weights(32, 0.5f);
        std::vector<uint8_t> bytes(weights.size() * 4);
        std::memcpy(bytes.data(), weights.data(), bytes.size());
        writer.add_tensor("cls.output.weight", {32}, kernels::TensorType::f32, bytes);
      });
  try {
    EmbeddingModel::load(with_head);
    FAIL() << "a bert file with a classification head loaded";
  } catch (const engine::GgufError& error) {
    EXPECT_NE(std::string(error.what()).find("'cls.output.weight'"), std::string::npos)
        << error.what();
  }
  engine::ModelShape moe = decoder_shape("mean");
  moe.experts = 2;
  moe.experts_used = 1;
  EXPECT_THROW(EmbeddingModel::load(written(moe, "decoder-moe")), engine::GgufError);
}

}  // namespace
}  // namespace chatflow::testing
