// A GGUF file (llama.cpp's model format, versions 2 and 3), memory-mapped and fully checked
// before anything is read from it: every count, string, array and tensor range is validated
// against the file size, and a bad file yields an error naming the offset and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor_type.h"

namespace chatflow::engine {

// A malformed or unsupported GGUF file.
class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class GgufValueType : uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};

std::string_view to_string(GgufValueType type);
// Bytes of one value of a fixed-size type; 0 for strings and arrays.
size_t scalar_bytes(GgufValueType type);

// One metadata value. Arrays of numbers keep a pointer into the mapped file (they can hold a
// 150,000-entry score table); arrays of strings are decoded.
struct GgufValue {
  GgufValueType type = GgufValueType::uint8;
  GgufValueType element_type = GgufValueType::uint8;  // arrays only
  uint64_t unsigned_value = 0;
  int64_t signed_value = 0;
  double float_value = 0;
  bool bool_value = false;
  std::string string_value;
  std::vector<std::string> strings;  // array of strings
  const uint8_t* array_data = nullptr;
  uint64_t array_count = 0;

  bool is_integer() const;
  bool is_array_of(GgufValueType element) const {
    return type == GgufValueType::array && element_type == element;
  }
  // "uint32 7", "array of 512 float32", "string \"llama\"": for messages and `chatflow inspect`.
  std::string describe() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // ggml order: shape[0] is the contiguous (row) dimension
  kernels::TensorType type = kernels::TensorType::f32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;
  const uint8_t* data = nullptr;

  int64_t elements() const;
  int64_t rows() const { return shape.empty() ? 0 : elements() / shape[0]; }
  std::string shape_text() const;
};

class GgufFile {
 public:
  // Maps and checks `path`; throws GgufError.
  static std::shared_ptr<const GgufFile> open(const std::string& path);
  // Checks a GGUF image already in memory (copied); for tests and fuzzing.
  static std::shared_ptr<const GgufFile> from_bytes(std::string_view bytes,
                                                    std::string name = "<memory>");

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t size() const { return size_; }
  uint32_t alignment() const { return alignment_; }
  // Whether the bytes are a mapping of the file (open), whose pages may be handed back to the
  // kernel and read again, rather than a copy in memory (from_bytes).
  bool mapped() const { return mapping_ != nullptr; }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Typed metadata access; a missing key or wrong type throws GgufError naming the key.
  std::string get_string(const std::string& key) const;
  uint64_t get_unsigned(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::optional<std::string> get_string_or(const std::string& key) const;
  std::optional<uint64_t> get_unsigned_or(const std::string& key) const;
  std::optional<double> get_float_or(const std::string& key) const;
  std::optional<bool> get_bool_or(const std::string& key) const;

 private:
  GgufFile() = default;
  void parse();
  // Points each tensor at its data, which starts at `data_start`; throws when it is past the end.
  void locate_tensor_data(uint64_t data_start);

  std::string path_;
  const uint8_t* bytes_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;  // munmap'ed on destruction
  std::string owned_;        // from_bytes keeps its copy here
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace chatflow::engine
