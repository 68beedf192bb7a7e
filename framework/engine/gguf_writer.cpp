#include "framework/engine/gguf_writer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace chatflow::engine {
namespace {

constexpr uint32_t kAlignment = 32;

template <class T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void append_string(std::string& out, const std::string& text) {
  append<uint64_t>(out, text.size());
  out += text;
}

// A scalar value in its own type's encoding, from the widest field that holds it.
void append_scalar(std::string& payload, const GgufValue& value) {
  switch (value.type) {
    case GgufValueType::uint8:
      append<uint8_t>(payload, static_cast<uint8_t>(value.unsigned_value));
      break;
    case GgufValueType::int8:
      append<int8_t>(payload, static_cast<int8_t>(value.signed_value));
      break;
    case GgufValueType::uint16:
      append<uint16_t>(payload, static_cast<uint16_t>(value.unsigned_value));
      break;
    case GgufValueType::int16:
      append<int16_t>(payload, static_cast<int16_t>(value.signed_value));
      break;
    case GgufValueType::uint32:
      append<uint32_t>(payload, static_cast<uint32_t>(value.unsigned_value));
      break;
    case GgufValueType::int32:
      append<int32_t>(payload, static_cast<int32_t>(value.signed_value));
      break;
    case GgufValueType::uint64:
      append<uint64_t>(payload, value.unsigned_value);
      break;
    case GgufValueType::int64:
      append<int64_t>(payload, value.signed_value);
      break;
    case GgufValueType::float32:
      append<float>(payload, static_cast<float>(value.float_value));
      break;
    case GgufValueType::float64:
      append<double>(payload, value.float_value);
      break;
    case GgufValueType::boolean:
      append<uint8_t>(payload, value.bool_value ? 1 : 0);
      break;
    case GgufValueType::string:
      append_string(payload, value.string_value);
      break;
    case GgufValueType::array:
      break;
  }
}

// An array's element type, count and elements; scalar elements are copied as the file holds
// them.
void append_array(std::string& payload, const GgufValue& value) {
  append(payload, static_cast<uint32_t>(value.element_type));
  append<uint64_t>(payload, value.array_count);
  if (value.element_type == GgufValueType::string) {
    for (const auto& text : value.strings)
      append_string(payload, text);
  } else {
    payload.append(reinterpret_cast<const char*>(value.array_data),
                   value.array_count * scalar_bytes(value.element_type));
  }
}

}  // namespace

void GgufWriter::put(const std::string& key, GgufValueType type, std::string payload) {
  for (auto& entry : entries_) {
    if (entry.key == key) {
      entry.type = type;
      entry.payload = std::move(payload);
      return;
    }
  }
  entries_.push_back({key, type, std::move(payload)});
}

void GgufWriter::set_string(const std::string& key, const std::string& value) {
  std::string payload;
  append_string(payload, value);
  put(key, GgufValueType::string, std::move(payload));
}

void GgufWriter::set_uint32(const std::string& key, uint32_t value) {
  std::string payload;
  append(payload, value);
  put(key, GgufValueType::uint32, std::move(payload));
}

void GgufWriter::set_float32(const std::string& key, float value) {
  std::string payload;
  append(payload, value);
  put(key, GgufValueType::float32, std::move(payload));
}

void GgufWriter::set_bool(const std::string& key, bool value) {
  put(key, GgufValueType::boolean, std::string(1, value ? '\1' : '\0'));
}

void GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& values) {
  std::string payload;
  append(payload, static_cast<uint32_t>(GgufValueType::string));
  append<uint64_t>(payload, values.size());
  for (const auto& value : values)
    append_string(payload, value);
  put(key, GgufValueType::array, std::move(payload));
}

void GgufWriter::set_float32s(const std::string& key, const std::vector<float>& values) {
  std::string payload;
  append(payload, static_cast<uint32_t>(GgufValueType::float32));
  append<uint64_t>(payload, values.size());
  for (float value : values)
    append(payload, value);
  put(key, GgufValueType::array, std::move(payload));
}

void GgufWriter::set_int32s(const std::string& key, const std::vector<int32_t>& values) {
  std::string payload;
  append(payload, static_cast<uint32_t>(GgufValueType::int32));
  append<uint64_t>(payload, values.size());
  for (int32_t value : values)
    append(payload, value);
  put(key, GgufValueType::array, std::move(payload));
}

void GgufWriter::set_bytes(const std::string& key, const std::string& bytes) {
  std::string payload;
  append(payload, static_cast<uint32_t>(GgufValueType::uint8));
  append<uint64_t>(payload, bytes.size());
  payload += bytes;
  put(key, GgufValueType::array, std::move(payload));
}

void GgufWriter::copy(const GgufFile& file, const std::string& key) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return;
  std::string payload;
  if (value->type != GgufValueType::array) {
    append_scalar(payload, *value);
  } else {
    append_array(payload, *value);
  }
  put(key, value->type, std::move(payload));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> shape,
                            kernels::TensorType type, std::vector<uint8_t> data) {
  int64_t rows = 1;
  for (size_t i = 1; i < shape.size(); ++i)
    rows *= shape[i];
  if (data.size() != kernels::row_bytes(type, shape.at(0)) * static_cast<size_t>(rows)) {
    throw std::invalid_argument("tensor '" + name +
                                "': data size does not match its shape and type");
  }
  tensors_.push_back({name, std::move(shape), type, std::move(data)});
}

void GgufWriter::write(const std::string& path) const {
  std::string header;
  append<uint32_t>(header, 0x46554747);
  append<uint32_t>(header, 3);
  append<uint64_t>(header, tensors_.size());
  append<uint64_t>(header, entries_.size());
  for (const auto& entry : entries_) {
    append_string(header, entry.key);
    append(header, static_cast<uint32_t>(entry.type));
    header += entry.payload;
  }
  uint64_t offset = 0;
  for (const auto& tensor : tensors_) {
    append_string(header, tensor.name);
    append<uint32_t>(header, static_cast<uint32_t>(tensor.shape.size()));
    for (int64_t extent : tensor.shape)
      append<uint64_t>(header, static_cast<uint64_t>(extent));
    append<uint32_t>(header, static_cast<uint32_t>(tensor.type));
    append<uint64_t>(header, offset);
    offset += (tensor.data.size() + kAlignment - 1) / kAlignment * kAlignment;
  }
  header.resize((header.size() + kAlignment - 1) / kAlignment * kAlignment, '\0');
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  file.write(header.data(), static_cast<std::streamsize>(header.size()));
  static const char kPadding[kAlignment] = {};
  for (const auto& tensor : tensors_) {
    file.write(reinterpret_cast<const char*>(tensor.data.data()),
               static_cast<std::streamsize>(tensor.data.size()));
    size_t padding = (kAlignment - tensor.data.size() % kAlignment) % kAlignment;
    file.write(kPadding, static_cast<std::streamsize>(padding));
  }
  if (!file) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
}

}  // namespace chatflow::engine
