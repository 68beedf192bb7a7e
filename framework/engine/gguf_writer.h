// Writes GGUF version 3 files: metadata of every type and tensors at aligned offsets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/engine/gguf_file.h"
#include "kernels/tensor_type.h"

namespace chatflow::engine {

class GgufWriter {
 public:
  void set_string(const std::string& key, const std::string& value);
  void set_uint32(const std::string& key, uint32_t value);
  void set_float32(const std::string& key, float value);
  void set_bool(const std::string& key, bool value);
  void set_strings(const std::string& key, const std::vector<std::string>& values);
  void set_float32s(const std::string& key, const std::vector<float>& values);
  void set_int32s(const std::string& key, const std::vector<int32_t>& values);
  // An array of uint8: raw bytes such as tokenizer.ggml.precompiled_charsmap.
  void set_bytes(const std::string& key, const std::string& bytes);
  // Copies one metadata entry of another file as it is.
  void copy(const GgufFile& file, const std::string& key);

  // `data` must hold row_bytes(type, shape[0]) * rows bytes. Shapes are in GGUF order.
  void add_tensor(const std::string& name, std::vector<int64_t> shape, kernels::TensorType type,
                  std::vector<uint8_t> data);

  // Throws std::runtime_error on I/O errors.
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string key;
    GgufValueType type;
    std::string payload;  // the value's encoding after its type
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    kernels::TensorType type;
    std::vector<uint8_t> data;
  };
  void put(const std::string& key, GgufValueType type, std::string payload);

  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace chatflow::engine
