#include "framework/embedding/safetensors.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <boost/json.hpp>

#include "kernels/half.h"

namespace chatflow::embedding {
namespace json = boost::json;

namespace {

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16") return 2;
  if (dtype == "I8" || dtype == "U8") return 1;
  return 0;
}

}  // namespace

int64_t SafeTensor::elements() const {
  int64_t count = 1;
  for (int64_t dimension : shape)
    count *= dimension;
  return count;
}

std::vector<float> SafeTensor::floats() const {
  std::vector<float> out(static_cast<size_t>(elements()));
  auto convert = [&](size_t width, auto to_float) {
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = to_float(bytes.data() + i * width);
  };
  auto half = [](auto decode) {
    return [decode](const char* at) {
      uint16_t value;
      std::memcpy(&value, at, 2);
      return decode(value);
    };
  };
  if (dtype == "F32") {
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
  } else if (dtype == "F64") {
    convert(8, [](const char* at) {
      double value;
      std::memcpy(&value, at, 8);
      return static_cast<float>(value);
    });
  } else if (dtype == "F16") {
    convert(2, half(kernels::f16_to_f32));
  } else if (dtype == "BF16") {
    convert(2, half(kernels::bf16_to_f32));
  } else {
    throw std::runtime_error("tensor of type " + dtype + " is not floating point");
  }
  return out;
}

std::vector<int64_t> SafeTensor::integers() const {
  std::vector<int64_t> out(static_cast<size_t>(elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == "I32") {
      int32_t value;
      std::memcpy(&value, bytes.data() + i * 4, 4);
      out[i] = value;
    } else if (dtype == "I64") {
      std::memcpy(&out[i], bytes.data() + i * 8, 8);
    } else {
      throw std::runtime_error("tensor of type " + dtype + " is not an integer type");
    }
  }
  return out;
}

SafeTensors SafeTensors::load(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(path + ": cannot open");
  std::stringstream buffer;
  buffer << file.rdbuf();
  std::string data = buffer.str();
  auto fail = [&](const std::string& why) { throw std::runtime_error(path + ": " + why); };
  if (data.size() < 8) fail("too short for a safetensors file");
  uint64_t header_size;
  std::memcpy(&header_size, data.data(), 8);
  if (header_size > data.size() - 8) fail("the header length runs past the end of the file");
  std::error_code error;
  json::value header = json::parse(std::string_view(data.data() + 8, header_size), error);
  if (error || !header.is_object()) fail("the header is not a JSON object");
  size_t base = 8 + header_size;
  SafeTensors result;
  for (const auto& [name, entry] : header.get_object()) {
    if (name == "__metadata__") continue;
    const json::object* object = entry.if_object();
    if (!object) fail("tensor '" + std::string(name) + "' is not described by an object");
    SafeTensor tensor;
    try {
      tensor.dtype = std::string(object->at("dtype").as_string());
      for (const auto& dimension : object->at("shape").as_array())
        tensor.shape.push_back(dimension.to_number<int64_t>());
      const auto& offsets = object->at("data_offsets").as_array();
      auto begin = offsets.at(0).to_number<uint64_t>();
      auto end = offsets.at(1).to_number<uint64_t>();
      size_t size = dtype_size(tensor.dtype);
      if (size == 0) fail("tensor '" + std::string(name) + "' has unknown dtype " + tensor.dtype);
      if (end < begin || end > data.size() - base)
        fail("tensor '" + std::string(name) + "' lies outside the file");
      if (end - begin != static_cast<uint64_t>(tensor.elements()) * size)
        fail("tensor '" + std::string(name) + "' has " + std::to_string(end - begin) +
             " bytes, its shape needs " +
             std::to_string(tensor.elements() * static_cast<int64_t>(size)));
      tensor.bytes = data.substr(base + begin, end - begin);
    } catch (const std::runtime_error&) {
      throw;
    } catch (const std::exception& bad) {
      fail("tensor '" + std::string(name) + "' is described wrongly: " + bad.what());
    }
    result.tensors_.emplace(std::string(name), std::move(tensor));
  }
  return result;
}

const SafeTensor* SafeTensors::find(const std::string& name) const {
  auto found = tensors_.find(name);
  return found == tensors_.end() ? nullptr : &found->second;
}

}  // namespace chatflow::embedding
