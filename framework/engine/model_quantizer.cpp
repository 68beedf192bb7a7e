#include "framework/engine/model_quantizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "framework/engine/compute_threads.h"
#include "framework/engine/gguf_file.h"
#include "framework/engine/gguf_writer.h"
#include "kernels/quantize.h"

namespace chatflow::engine {
namespace {

RecipeModel recipe_model(const GgufFile& file) {
  RecipeModel model;
  const std::string arch = file.get_string_or("general.architecture").value_or("llama");
  auto integer = [&](const std::string& key, int64_t fallback) {
    return static_cast<int64_t>(file.get_unsigned_or(arch + key).value_or(fallback));
  };
  model.layers = std::max<int64_t>(1, integer(".block_count", 1));
  const int64_t heads = integer(".attention.head_count", 1);
  const int64_t kv_heads = integer(".attention.head_count_kv", heads);
  model.query_groups = kv_heads > 0 ? std::max<int64_t>(1, heads / kv_heads) : 1;
  model.has_output = file.find_tensor("output.weight") != nullptr;
  return model;
}

// Converts one tensor row by row on `threads`; fills the report's error figures.
std::vector<uint8_t> convert(const GgufTensorInfo& tensor, kernels::TensorType to,
                             ComputeThreads& threads, TensorQuantization& report) {
  const int64_t columns = tensor.shape[0];
  const int64_t rows = tensor.rows();
  const size_t in_row = kernels::row_bytes(tensor.type, columns);
  const size_t out_row = kernels::row_bytes(to, columns);
  std::vector<uint8_t> out(out_row * static_cast<size_t>(rows));
  std::vector<double> error(static_cast<size_t>(rows)), energy(static_cast<size_t>(rows));
  // Pieces of several rows: each allocates its two row buffers once.
  const int64_t grain = std::max<int64_t>(1, rows / (threads.threads() * 4));
  threads.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> values(static_cast<size_t>(columns)), back(static_cast<size_t>(columns));
    for (int64_t r = begin; r < end; ++r) {
      kernels::dequantize_row(tensor.type, tensor.data + static_cast<size_t>(r) * in_row, columns,
                              values.data());
      uint8_t* row = out.data() + static_cast<size_t>(r) * out_row;
      kernels::quantize_row(to, values.data(), columns, row);
      kernels::dequantize_row(to, row, columns, back.data());
      double e = 0, v = 0;
      for (int64_t k = 0; k < columns; ++k) {
        double diff = static_cast<double>(back[k]) - values[k];
        e += diff * diff;
        v += static_cast<double>(values[k]) * values[k];
      }
      error[static_cast<size_t>(r)] = e;
      energy[static_cast<size_t>(r)] = v;
    }
  });
  double total_error = 0, total_energy = 0;
  for (int64_t r = 0; r < rows; ++r) {
    total_error += error[static_cast<size_t>(r)];
    total_energy += energy[static_cast<size_t>(r)];
  }
  const double count = static_cast<double>(rows * columns);
  report.rms_error = std::sqrt(total_error / count);
  report.rms = std::sqrt(total_energy / count);
  return out;
}

}  // namespace

QuantizeReport quantize_model(const std::string& input, const std::string& output,
                              const QuantizeOptions& options, const QuantizeProgress& progress) {
  auto file = GgufFile::open(input);
  const RecipeModel model = recipe_model(*file);
  GgufWriter writer;
  for (const auto& [key, value] : file->metadata()) {
    if (key == "general.file_type" || key == "general.quantization_version" ||
        key == "general.alignment")
      continue;
    writer.copy(*file, key);
  }
  writer.set_uint32("general.file_type", options.recipe.file_type);
  writer.set_uint32("general.quantization_version", 2);
  ComputeThreads threads(std::max(1, options.threads));
  QuantizeReport report;
  const auto& tensors = file->tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& tensor = tensors[i];
    TensorQuantization item;
    item.name = tensor.name;
    item.shape = tensor.shape;
    item.from = tensor.type;
    item.bytes_in = tensor.bytes;
    auto wanted = recipe_tensor_type(options.recipe, model, tensor.name, tensor.shape[0],
                                     static_cast<int64_t>(tensor.shape.size()));
    item.to = wanted.value_or(tensor.type);
    if (item.to == tensor.type) {
      writer.add_tensor(tensor.name, tensor.shape, tensor.type,
                        std::vector<uint8_t>(tensor.data, tensor.data + tensor.bytes));
    } else {
      if (!kernels::computable(tensor.type)) {
        throw std::runtime_error(input + ": tensor '" + tensor.name + "' has type " +
                                 std::string(kernels::to_string(tensor.type)) +
                                 ", which chatflow cannot read");
      }
      if (kernels::is_quantized(tensor.type) && !options.allow_requantize) {
        throw std::runtime_error(
            input + ": tensor '" + tensor.name + "' is already " +
            std::string(kernels::to_string(tensor.type)) +
            "; quantising it again loses more than quantising the original (use an f16, bf16 "
            "or f32 file, or pass --allow-requantize)");
      }
      writer.add_tensor(tensor.name, tensor.shape, item.to,
                        convert(tensor, item.to, threads, item));
    }
    item.bytes_out =
        kernels::row_bytes(item.to, tensor.shape[0]) * static_cast<uint64_t>(tensor.rows());
    report.bytes_in += item.bytes_in;
    report.bytes_out += item.bytes_out;
    report.weights += tensor.elements();
    report.tensors.push_back(item);
    if (progress) progress(i, tensors.size(), report.tensors.back());
  }
  writer.write(output);
  return report;
}

}  // namespace chatflow::engine
