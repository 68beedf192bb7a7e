#include "framework/engine/gguf_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace chatflow::engine {

std::string_view to_string(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8:
      return "uint8";
    case GgufValueType::int8:
      return "int8";
    case GgufValueType::uint16:
      return "uint16";
    case GgufValueType::int16:
      return "int16";
    case GgufValueType::uint32:
      return "uint32";
    case GgufValueType::int32:
      return "int32";
    case GgufValueType::float32:
      return "float32";
    case GgufValueType::boolean:
      return "bool";
    case GgufValueType::string:
      return "string";
    case GgufValueType::array:
      return "array";
    case GgufValueType::uint64:
      return "uint64";
    case GgufValueType::int64:
      return "int64";
    case GgufValueType::float64:
      return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::uint8:
    case GgufValueType::int8:
    case GgufValueType::uint16:
    case GgufValueType::int16:
    case GgufValueType::uint32:
    case GgufValueType::int32:
    case GgufValueType::uint64:
    case GgufValueType::int64:
      return true;
    default:
      return false;
  }
}

std::string GgufValue::describe() const {
  std::ostringstream text;
  text << to_string(type);
  switch (type) {
    case GgufValueType::string:
      text << " \""
           << (string_value.size() > 60 ? string_value.substr(0, 60) + "..." : string_value)
           << "\"";
      break;
    case GgufValueType::array:
      text << " of " << array_count << " " << to_string(element_type);
      break;
    case GgufValueType::boolean:
      text << " " << (bool_value ? "true" : "false");
      break;
    case GgufValueType::float32:
    case GgufValueType::float64:
      text << " " << float_value;
      break;
    case GgufValueType::int8:
    case GgufValueType::int16:
    case GgufValueType::int32:
    case GgufValueType::int64:
      text << " " << signed_value;
      break;
    default:
      text << " " << unsigned_value;
      break;
  }
  return text.str();
}

int64_t GgufTensorInfo::elements() const {
  int64_t count = 1;
  for (int64_t dimension : shape)
    count *= dimension;
  return count;
}

std::string GgufTensorInfo::shape_text() const {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint64_t kMaxDimensions = 4;
constexpr uint64_t kMaxStringBytes = 1ull << 30;

// Reads the header of a GGUF image front to back, refusing anything out of bounds.
class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  uint64_t offset() const { return offset_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw GgufError(name_ + ": invalid GGUF at offset " + std::to_string(offset_) + ": " + what);
  }

  void need(uint64_t bytes, const char* what) {
    if (bytes > size_ - offset_) {
      fail(std::string("expected ") + what + " (" + std::to_string(bytes) +
           " bytes) but the file ends after " + std::to_string(size_ - offset_) + " more bytes");
    }
  }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }

  std::string read_string(const char* what) {
    uint64_t start = offset_;
    uint64_t length = read<uint64_t>(what);
    if (length > kMaxStringBytes || length > size_ - offset_) {
      offset_ = start;  // point at the string, not past its length field
      fail(std::string(what) + " claims " + std::to_string(length) +
           " bytes, more than the file holds");
    }
    std::string text(reinterpret_cast<const char*>(data_ + offset_), length);
    offset_ += length;
    return text;
  }

  GgufValueType read_type(const char* what) {
    uint32_t raw = read<uint32_t>(what);
    if (raw > static_cast<uint32_t>(GgufValueType::float64)) {
      offset_ -= 4;
      fail(std::string("unknown metadata value type ") + std::to_string(raw) + " for " + what);
    }
    return static_cast<GgufValueType>(raw);
  }

  GgufValue read_value(GgufValueType type, const std::string& key, bool inside_array) {
    GgufValue value;
    value.type = type;
    if (type == GgufValueType::array) {
      read_array(value, key, inside_array);
    } else {
      read_scalar(value, key);
    }
    fill_integer_views(value);
    return value;
  }

 private:
  void read_scalar(GgufValue& value, const std::string& key) {
    switch (value.type) {
      case GgufValueType::uint8:
        value.unsigned_value = read<uint8_t>("a uint8");
        break;
      case GgufValueType::int8:
        value.signed_value = read<int8_t>("an int8");
        break;
      case GgufValueType::uint16:
        value.unsigned_value = read<uint16_t>("a uint16");
        break;
      case GgufValueType::int16:
        value.signed_value = read<int16_t>("an int16");
        break;
      case GgufValueType::uint32:
        value.unsigned_value = read<uint32_t>("a uint32");
        break;
      case GgufValueType::int32:
        value.signed_value = read<int32_t>("an int32");
        break;
      case GgufValueType::uint64:
        value.unsigned_value = read<uint64_t>("a uint64");
        break;
      case GgufValueType::int64:
        value.signed_value = read<int64_t>("an int64");
        break;
      case GgufValueType::float32:
        value.float_value = read<float>("a float32");
        break;
      case GgufValueType::float64:
        value.float_value = read<double>("a float64");
        break;
      case GgufValueType::boolean: {
        uint8_t raw = read<uint8_t>("a bool");
        if (raw > 1)
          fail("bool value " + std::to_string(raw) + " for '" + key + "' is neither 0 nor 1");
        value.bool_value = raw == 1;
        break;
      }
      case GgufValueType::string:
        value.string_value = read_string("a string value");
        break;
      case GgufValueType::array:  // read_array's
        break;
    }
  }

  // Strings are read one by one; the elements of other arrays stay in the file, pointed at.
  void read_array(GgufValue& value, const std::string& key, bool inside_array) {
    if (inside_array) fail("nested arrays are not supported (key '" + key + "')");
    value.element_type = read_type("an array element type");
    value.array_count = read<uint64_t>("an array length");
    if (value.element_type == GgufValueType::string) {
      // Each string has at least its 8-byte length: bound the count before reserving.
      if (value.array_count > (size_ - offset_) / 8)
        fail("array of strings '" + key + "' claims " + std::to_string(value.array_count) +
             " entries");
      value.strings.reserve(value.array_count);
      for (uint64_t i = 0; i < value.array_count; ++i)
        value.strings.push_back(read_string("an array string"));
    } else if (value.element_type == GgufValueType::array) {
      fail("nested arrays are not supported (key '" + key + "')");
    } else {
      size_t element = scalar_bytes(value.element_type);
      if (value.array_count > (size_ - offset_) / element) {
        fail("array '" + key + "' claims " + std::to_string(value.array_count) + " " +
             std::string(to_string(value.element_type)) + " values, more than the file holds");
      }
      value.array_data = data_ + offset_;
      offset_ += value.array_count * element;
    }
  }

  // An integer is readable both as signed and as unsigned: negative values read as 0 unsigned,
  // values beyond int64 as its maximum signed.
  static void fill_integer_views(GgufValue& value) {
    if (value.type == GgufValueType::int8 || value.type == GgufValueType::int16 ||
        value.type == GgufValueType::int32 || value.type == GgufValueType::int64) {
      value.unsigned_value = value.signed_value < 0 ? 0 : static_cast<uint64_t>(value.signed_value);
    } else if (value.is_integer()) {
      value.signed_value =
          value.unsigned_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
              ? std::numeric_limits<int64_t>::max()
              : static_cast<int64_t>(value.unsigned_value);
    }
  }

  const uint8_t* data_;
  uint64_t size_;
  const std::string& name_;
  uint64_t offset_ = 0;
};

void read_metadata(Reader& reader, uint64_t count, std::map<std::string, GgufValue>& metadata) {
  for (uint64_t i = 0; i < count; ++i) {
    std::string key = reader.read_string("a metadata key");
    GgufValueType type = reader.read_type(("the type of '" + key + "'").c_str());
    GgufValue value = reader.read_value(type, key, false);
    if (!metadata.emplace(key, std::move(value)).second)
      reader.fail("metadata key '" + key + "' appears twice");
  }
}

// The tensor data's alignment, which general.alignment may set.
uint32_t checked_alignment(const GgufValue& alignment, const std::string& path) {
  if (alignment.type != GgufValueType::uint32 || alignment.unsigned_value == 0 ||
      (alignment.unsigned_value & (alignment.unsigned_value - 1)) != 0) {
    throw GgufError(path + ": general.alignment must be a power-of-two uint32, got " +
                    alignment.describe());
  }
  return static_cast<uint32_t>(alignment.unsigned_value);
}

// Reads the dimensions into tensor.shape and returns their product, bounded so that no size
// computed from them overflows.
uint64_t read_tensor_shape(Reader& reader, GgufTensorInfo& tensor) {
  uint32_t dimensions = reader.read<uint32_t>("a tensor's dimension count");
  if (dimensions == 0 || dimensions > kMaxDimensions) {
    reader.fail("tensor '" + tensor.name + "' has " + std::to_string(dimensions) +
                " dimensions (1 to 4 allowed)");
  }
  uint64_t elements = 1;
  for (uint32_t d = 0; d < dimensions; ++d) {
    uint64_t extent = reader.read<uint64_t>("a tensor dimension");
    if (extent == 0 || extent > (1ull << 40) || elements > (1ull << 42) / extent) {
      reader.fail("tensor '" + tensor.name + "' has an impossible dimension " +
                  std::to_string(extent));
    }
    elements *= extent;
    tensor.shape.push_back(static_cast<int64_t>(extent));
  }
  return elements;
}

kernels::TensorType read_tensor_type(Reader& reader, const GgufTensorInfo& tensor) {
  uint32_t type_id = reader.read<uint32_t>("a tensor type");
  auto type = kernels::tensor_type_from_id(type_id);
  if (!type) {
    reader.fail("tensor '" + tensor.name + "' has type id " + std::to_string(type_id) +
                ", which is not a GGUF tensor type");
  }
  return *type;
}

// One entry of the tensor table: its name, shape, type and data offset (not yet its data).
GgufTensorInfo read_tensor_info(Reader& reader, uint32_t alignment) {
  GgufTensorInfo tensor;
  tensor.name = reader.read_string("a tensor name");
  uint64_t elements = read_tensor_shape(reader, tensor);
  tensor.type = read_tensor_type(reader, tensor);
  if (tensor.shape[0] % kernels::block_values(tensor.type) != 0) {
    reader.fail("tensor '" + tensor.name + "' rows of " + std::to_string(tensor.shape[0]) +
                " values are not a multiple of the " +
                std::string(kernels::to_string(tensor.type)) + " block size " +
                std::to_string(kernels::block_values(tensor.type)));
  }
  tensor.bytes = kernels::row_bytes(tensor.type, tensor.shape[0]) * (elements / tensor.shape[0]);
  tensor.offset = reader.read<uint64_t>("a tensor data offset");
  if (tensor.offset % alignment != 0) {
    reader.fail("tensor '" + tensor.name + "' data offset " + std::to_string(tensor.offset) +
                " is not a multiple of the alignment " + std::to_string(alignment));
  }
  return tensor;
}

}  // namespace

size_t scalar_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8:
    case GgufValueType::int8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::uint16:
    case GgufValueType::int16:
      return 2;
    case GgufValueType::uint32:
    case GgufValueType::int32:
    case GgufValueType::float32:
      return 4;
    case GgufValueType::uint64:
    case GgufValueType::int64:
    case GgufValueType::float64:
      return 8;
    default:
      return 0;
  }
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
  int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) throw GgufError(path + ": cannot open: " + std::strerror(errno));
  struct stat status {};
  if (::fstat(descriptor, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(descriptor);
    throw GgufError(path + ": not a regular file");
  }
  auto file = std::shared_ptr<GgufFile>(new GgufFile());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(status.st_size);
  if (file->size_ > 0) {
    void* mapping = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, descriptor, 0);
    if (mapping == MAP_FAILED) {
      int error = errno;
      ::close(descriptor);
      throw GgufError(path + ": cannot map: " + std::strerror(error));
    }
    file->mapping_ = mapping;
    file->bytes_ = static_cast<const uint8_t*>(mapping);
  }
  ::close(descriptor);
  file->parse();
  return file;
}

std::shared_ptr<const GgufFile> GgufFile::from_bytes(std::string_view bytes, std::string name) {
  auto file = std::shared_ptr<GgufFile>(new GgufFile());
  file->path_ = std::move(name);
  file->owned_ = std::string(bytes);
  file->bytes_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  file->parse();
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

void GgufFile::parse() {
  Reader reader(bytes_, size_, path_);
  uint32_t magic = reader.read<uint32_t>("the GGUF magic");
  if (magic != kMagic) reader.fail("not a GGUF file (the first four bytes are not \"GGUF\")");
  version_ = reader.read<uint32_t>("the GGUF version");
  if (version_ != 2 && version_ != 3) {
    reader.fail("unsupported GGUF version " + std::to_string(version_) +
                " (this reader supports 2 and 3)");
  }
  uint64_t tensor_count = reader.read<uint64_t>("the tensor count");
  uint64_t metadata_count = reader.read<uint64_t>("the metadata count");
  // Every metadata entry and tensor needs at least a dozen bytes: reject absurd counts early.
  if (tensor_count > size_ / 24 || metadata_count > size_ / 12) {
    reader.fail("implausible counts: " + std::to_string(tensor_count) + " tensors, " +
                std::to_string(metadata_count) + " metadata entries in a " + std::to_string(size_) +
                "-byte file");
  }
  read_metadata(reader, metadata_count, metadata_);
  if (const GgufValue* alignment = find("general.alignment"))
    alignment_ = checked_alignment(*alignment, path_);
  tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo tensor = read_tensor_info(reader, alignment_);
    if (!tensor_index_.emplace(tensor.name, tensors_.size()).second)
      reader.fail("tensor '" + tensor.name + "' appears twice");
    tensors_.push_back(std::move(tensor));
  }
  locate_tensor_data((reader.offset() + alignment_ - 1) / alignment_ * alignment_);
}

void GgufFile::locate_tensor_data(uint64_t data_start) {
  for (auto& tensor : tensors_) {
    if (data_start > size_ || tensor.offset > size_ - data_start ||
        tensor.bytes > size_ - data_start - tensor.offset) {
      throw GgufError(path_ + ": tensor '" + tensor.name + "' " + tensor.shape_text() + " " +
                      std::string(kernels::to_string(tensor.type)) + " needs " +
                      std::to_string(tensor.bytes) + " bytes at offset " +
                      std::to_string(data_start + tensor.offset) + ", but the file has only " +
                      std::to_string(size_) + " bytes (truncated?)");
    }
    tensor.data = bytes_ + data_start + tensor.offset;
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto found = metadata_.find(key);
  return found == metadata_.end() ? nullptr : &found->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto found = tensor_index_.find(name);
  return found == tensor_index_.end() ? nullptr : &tensors_[found->second];
}

namespace {

[[noreturn]] void wrong_type(const std::string& path, const std::string& key, const char* expected,
                             const GgufValue& value) {
  throw GgufError(path + ": metadata '" + key + "' should be " + expected + ", but is " +
                  value.describe());
}

}  // namespace

std::optional<std::string> GgufFile::get_string_or(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type != GgufValueType::string) wrong_type(path_, key, "a string", *value);
  return value->string_value;
}

std::optional<uint64_t> GgufFile::get_unsigned_or(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_integer() || value->signed_value < 0)
    wrong_type(path_, key, "a non-negative integer", *value);
  return value->unsigned_value;
}

std::optional<double> GgufFile::get_float_or(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type == GgufValueType::float32 || value->type == GgufValueType::float64)
    return value->float_value;
  if (value->is_integer()) return static_cast<double>(value->signed_value);
  wrong_type(path_, key, "a number", *value);
}

std::optional<bool> GgufFile::get_bool_or(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type != GgufValueType::boolean) wrong_type(path_, key, "a bool", *value);
  return value->bool_value;
}

std::string GgufFile::get_string(const std::string& key) const {
  if (auto value = get_string_or(key)) return *value;
  throw GgufError(path_ + ": required metadata '" + key + "' is missing");
}

uint64_t GgufFile::get_unsigned(const std::string& key) const {
  if (auto value = get_unsigned_or(key)) return *value;
  throw GgufError(path_ + ": required metadata '" + key + "' is missing");
}

double GgufFile::get_float(const std::string& key) const {
  if (auto value = get_float_or(key)) return *value;
  throw GgufError(path_ + ": required metadata '" + key + "' is missing");
}

bool GgufFile::get_bool(const std::string& key) const {
  if (auto value = get_bool_or(key)) return *value;
  throw GgufError(path_ + ": required metadata '" + key + "' is missing");
}

}  // namespace chatflow::engine
