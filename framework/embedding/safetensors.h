// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range, then the data. Read-only; every offset is
// checked against the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace chatflow::embedding {

struct SafeTensor {
  std::string dtype;  // "F32", "F64", "F16", "I32", ...
  std::vector<int64_t> shape;
  std::string bytes;  // the raw little-endian data

  int64_t elements() const;
  // The values as floats (F32, F64, F16); throws std::runtime_error for other types.
  std::vector<float> floats() const;
  // The values as integers (I32, I64); throws for other types.
  std::vector<int64_t> integers() const;
};

class SafeTensors {
 public:
  // Throws std::runtime_error naming the file and what is wrong.
  static SafeTensors load(const std::string& path);
  const SafeTensor* find(const std::string& name) const;

 private:
  std::map<std::string, SafeTensor> tensors_;
};

}  // namespace chatflow::embedding
