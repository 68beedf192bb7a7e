// The GGUF reader: a written file reads back exactly, and every kind of damage is an error that
// names the offset and the problem, never a crash or an out-of-bounds read.
#include "framework/engine/gguf_file.h"

#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "framework/engine/gguf_writer.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::string small_model_bytes() {
  ModelShape shape;
  shape.dim = 32;
  shape.layers = 1;
  shape.heads = 2;
  shape.kv_heads = 1;
  shape.ffn = 64;
  shape.type = kernels::TensorType::q8_0;
  return file_bytes(testing::temp_model(shape));
}

// GGUF header pieces for hand-made files.
template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}
void put_string(std::string& out, const std::string& text) {
  put<uint64_t>(out, text.size());
  out += text;
}
std::string header(uint32_t version, uint64_t tensors, uint64_t metadata) {
  std::string out;
  put<uint32_t>(out, 0x46554747);
  put<uint32_t>(out, version);
  put<uint64_t>(out, tensors);
  put<uint64_t>(out, metadata);
  return out;
}

std::string error_of(const std::string& bytes) {
  try {
    GgufFile::from_bytes(bytes, "bad.gguf");
  } catch (const GgufError& error) {
    return error.what();
  }
  return "";
}

TEST(GgufFile, WrittenMetadataAndTensorsReadBack) {
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  writer.set_uint32("answer", 42);
  writer.set_float32("pi", 3.25f);
  writer.set_bool("yes", true);
  writer.set_strings("words", {"a", "", "ccc"});
  writer.set_float32s("scores", {1.5f, -2.0f});
  writer.set_int32s("kinds", {1, -6});
  std::vector<uint8_t> data(2 * 3 * 4);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<uint8_t>(i);
  writer.add_tensor("matrix", {2, 3}, kernels::TensorType::f32, data);
  std::string path = testing::temp_path("roundtrip.gguf");
  writer.write(path);

  auto file = GgufFile::open(path);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->get_string("general.architecture"), "llama");
  EXPECT_EQ(file->get_unsigned("answer"), 42u);
  EXPECT_FLOAT_EQ(file->get_float("pi"), 3.25);
  EXPECT_TRUE(file->get_bool("yes"));
  EXPECT_EQ(file->find("words")->strings, (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(file->find("scores")->array_count, 2u);
  EXPECT_TRUE(file->find("kinds")->is_array_of(GgufValueType::int32));
  const GgufTensorInfo* tensor = file->find_tensor("matrix");
  ASSERT_NE(tensor, nullptr);
  EXPECT_EQ(tensor->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tensor->bytes, 24u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor->data) % 32, 0u) << "tensor data is aligned";
  EXPECT_EQ(std::vector<uint8_t>(tensor->data, tensor->data + 24), data);
}

TEST(GgufFile, TypedAccessNamesTheKeyAndTheMismatch) {
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  std::string path = testing::temp_path("typed.gguf");
  writer.write(path);
  auto file = GgufFile::open(path);
  try {
    file->get_unsigned("general.architecture");
    FAIL() << "expected an error";
  } catch (const GgufError& error) {
    EXPECT_NE(
        std::string(error.what())
            .find(
                "metadata 'general.architecture' should be a non-negative integer, but is string"),
        std::string::npos)
        << error.what();
  }
  EXPECT_THROW(file->get_string("llama.block_count"), GgufError);
}

TEST(GgufFile, RejectsWrongMagicAndVersion) {
  EXPECT_NE(error_of("GGML and more bytes here").find("not a GGUF file"), std::string::npos);
  EXPECT_NE(error_of(header(1, 0, 0)).find("unsupported GGUF version 1"), std::string::npos);
  EXPECT_NE(error_of(header(4, 0, 0)).find("unsupported GGUF version 4"), std::string::npos);
  EXPECT_NE(error_of("GG").find("at offset 0: expected the GGUF magic"), std::string::npos);
}

TEST(GgufFile, RejectsImplausibleCountsBeforeAllocating) {
  EXPECT_NE(error_of(header(3, 1ull << 60, 0)).find("implausible counts"), std::string::npos);
}

TEST(GgufFile, RejectsStringsAndArraysLongerThanTheFile) {
  std::string bytes = header(3, 0, 1);
  put<uint64_t>(bytes, 1ull << 40);  // key length
  EXPECT_NE(error_of(bytes).find("at offset 24: a metadata key claims"), std::string::npos)
      << error_of(bytes);

  bytes = header(3, 0, 1);
  put_string(bytes, "scores");
  put<uint32_t>(bytes, 9);  // array
  put<uint32_t>(bytes, 6);  // of float32
  put<uint64_t>(bytes, 1000000);
  EXPECT_NE(error_of(bytes).find("array 'scores' claims 1000000 float32 values"), std::string::npos)
      << error_of(bytes);
}

TEST(GgufFile, RejectsBadValueTypesNestingAndDuplicates) {
  std::string bytes = header(3, 0, 1);
  put_string(bytes, "key");
  put<uint32_t>(bytes, 77);
  EXPECT_NE(error_of(bytes).find("unknown metadata value type 77 for the type of 'key'"),
            std::string::npos)
      << error_of(bytes);

  bytes = header(3, 0, 1);
  put_string(bytes, "nested");
  put<uint32_t>(bytes, 9);
  put<uint32_t>(bytes, 9);
  put<uint64_t>(bytes, 1);
  EXPECT_NE(error_of(bytes).find("nested arrays are not supported"), std::string::npos);

  bytes = header(3, 0, 1);
  put_string(bytes, "flag");
  put<uint32_t>(bytes, 7);
  put<uint8_t>(bytes, 2);
  EXPECT_NE(error_of(bytes).find("bool value 2 for 'flag'"), std::string::npos);

  bytes = header(3, 0, 2);
  for (int i = 0; i < 2; ++i) {
    put_string(bytes, "same");
    put<uint32_t>(bytes, 4);
    put<uint32_t>(bytes, 1);
  }
  EXPECT_NE(error_of(bytes).find("metadata key 'same' appears twice"), std::string::npos);
}

TEST(GgufFile, RejectsBadTensorDescriptions) {
  auto tensor_file = [](uint32_t dimensions, uint64_t extent, uint32_t type, uint64_t offset) {
    std::string bytes = header(3, 1, 0);
    put_string(bytes, "weight");
    put<uint32_t>(bytes, dimensions);
    for (uint32_t d = 0; d < dimensions; ++d)
      put<uint64_t>(bytes, extent);
    put<uint32_t>(bytes, type);
    put<uint64_t>(bytes, offset);
    bytes.resize(bytes.size() + 128, '\0');
    return bytes;
  };
  EXPECT_NE(error_of(tensor_file(5, 2, 0, 0)).find("tensor 'weight' has 5 dimensions"),
            std::string::npos);
  EXPECT_NE(error_of(tensor_file(1, 0, 0, 0)).find("impossible dimension 0"), std::string::npos);
  EXPECT_NE(
      error_of(tensor_file(1, 4, 4, 0)).find("has type id 4, which is not a GGUF tensor type"),
      std::string::npos);
  EXPECT_NE(error_of(tensor_file(1, 4, 12, 0)).find("not a multiple of the q4_k block size 256"),
            std::string::npos);
  // A type chatflow cannot compute with is still a valid file: it opens (for `inspect`).
  std::string iq2 = tensor_file(1, 256, 16, 0);
  EXPECT_EQ(GgufFile::from_bytes(iq2)->tensors().at(0).type, kernels::TensorType::iq2_xxs);
  EXPECT_NE(error_of(tensor_file(1, 16, 8, 0)).find("not a multiple of the q8_0 block size 32"),
            std::string::npos);
  EXPECT_NE(
      error_of(tensor_file(1, 4, 0, 7)).find("offset 7 is not a multiple of the alignment 32"),
      std::string::npos);
  std::string beyond = error_of(tensor_file(2, 64, 0, 0));
  EXPECT_NE(beyond.find("needs 16384 bytes"), std::string::npos) << beyond;
  EXPECT_NE(beyond.find("(truncated?)"), std::string::npos);
}

TEST(GgufFile, EveryTruncationIsAnErrorNotACrash) {
  std::string bytes = small_model_bytes();
  ASSERT_NO_THROW(GgufFile::from_bytes(bytes));
  // Every cut inside the header, then every 61st byte through the tensor data.
  for (size_t length = 0; length < bytes.size(); length += length < 8192 ? 1 : 61) {
    EXPECT_THROW(GgufFile::from_bytes(bytes.substr(0, length)), GgufError) << "cut at " << length;
  }
}

TEST(GgufFile, RandomDamageIsAnErrorOrHarmlessNeverACrash) {
  std::string bytes = small_model_bytes();
  std::mt19937 random(7);
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string damaged = bytes;
    for (int flips = 0; flips < 3; ++flips) {
      size_t at = random() % 4096;
      damaged[at] = static_cast<char>(random());
    }
    try {
      GgufFile::from_bytes(damaged);
    } catch (const GgufError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 100);
}

TEST(GgufFile, MissingFileIsAClearError) {
  try {
    GgufFile::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const GgufError& error) {
    EXPECT_EQ(std::string(error.what()),
              "/nonexistent/model.gguf: cannot open: No such file or directory");
  }
}

}  // namespace
}  // namespace chatflow::engine
