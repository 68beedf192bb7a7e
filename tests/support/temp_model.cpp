#include "temp_model.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <unistd.h>

namespace chatflow::testing {

namespace {

// One directory per test process, removed when the process ends.
struct TemporaryDirectory {
  TemporaryDirectory()
      : path(std::filesystem::temp_directory_path() /
             ("chatflow-tests-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::filesystem::path path;
};

}  // namespace

std::string temp_path(const std::string& name) {
  static TemporaryDirectory directory;
  return (directory.path / name).string();
}

std::string temp_model(const engine::ModelShape& shape) {
  static std::mutex mutex;
  static std::map<std::string, std::string> written;
  std::string key =
      shape.architecture + "-" + std::to_string(shape.dim) + "-" + std::to_string(shape.layers) +
      "-" + std::to_string(shape.heads) + "-" + std::to_string(shape.kv_heads) + "-" +
      std::to_string(shape.ffn) + "-" + std::to_string(shape.context) + "-" +
      std::string(kernels::to_string(shape.type)) + "-" + std::to_string(shape.seed) +
      (shape.tie_embeddings ? "-tied" : "") + "-" + shape.rope_scaling + "-w" +
      std::to_string(shape.sliding_window) + "-e" + std::to_string(shape.experts) + "x" +
      std::to_string(shape.experts_used) + "-s" + std::to_string(shape.weight_scale) +
      (shape.recipe.empty() ? "" : "-" + shape.recipe) +
      (shape.vocabulary_from.empty()
           ? ""
           : "-" + std::filesystem::path(shape.vocabulary_from).stem().string());
  std::lock_guard lock(mutex);
  auto found = written.find(key);
  if (found != written.end()) return found->second;
  std::string path = temp_path(key + ".gguf");
  engine::write_random_model(shape, path);
  written.emplace(key, path);
  return path;
}

std::string fresh_path(const std::string& name) {
  std::string path = temp_path(name);
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    std::filesystem::remove(path + suffix);
  return path;
}

std::string write_temp_file(const std::string& name, const std::string& text) {
  std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string rewritten_model(
    const std::string& source_path, const std::string& name,
    const std::function<void(engine::GgufWriter&, const engine::GgufFile&)>& edit,
    const std::string& drop_tensor, const std::string& drop_key) {
  auto source = engine::GgufFile::open(source_path);
  engine::GgufWriter writer;
  for (const auto& [key, value] : source->metadata()) {
    if (key != drop_key) writer.copy(*source, key);
  }
  for (const auto& tensor : source->tensors()) {
    if (tensor.name == drop_tensor) continue;
    writer.add_tensor(tensor.name, tensor.shape, tensor.type,
                      std::vector<uint8_t>(tensor.data, tensor.data + tensor.bytes));
  }
  edit(writer, *source);
  std::string path = temp_path(name);
  writer.write(path);
  return path;
}

}  // namespace chatflow::testing
