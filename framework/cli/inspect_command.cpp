// chatflow inspect MODEL: a GGUF file's metadata and tensor table, like gguf-dump; with
// --against REFERENCE each tensor's RMS difference from the reference's tensor of that name
// (what a quantisation cost, tensor by tensor).
#include <cmath>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/engine/gguf_file.h"
#include "kernels/quantize.h"

namespace chatflow::cli {
namespace {

struct InspectOptions {
  std::string model;
  std::string against;
  bool all_tensors = false;
};

// RMS of (tensor - reference) and of the reference, both read as floats; nullopt when either
// type cannot be read or the shapes differ.
std::optional<std::pair<double, double>> rms_difference(const engine::GgufTensorInfo& tensor,
                                                        const engine::GgufTensorInfo& reference) {
  if (tensor.shape != reference.shape || !kernels::computable(tensor.type) ||
      !kernels::computable(reference.type))
    return std::nullopt;
  const int64_t columns = tensor.shape[0];
  std::vector<float> a(static_cast<size_t>(columns)), b(static_cast<size_t>(columns));
  double difference = 0, energy = 0;
  for (int64_t r = 0; r < tensor.rows(); ++r) {
    kernels::dequantize_row(
        tensor.type,
        tensor.data + static_cast<size_t>(r) * kernels::row_bytes(tensor.type, columns), columns,
        a.data());
    kernels::dequantize_row(
        reference.type,
        reference.data + static_cast<size_t>(r) * kernels::row_bytes(reference.type, columns),
        columns, b.data());
    for (int64_t k = 0; k < columns; ++k) {
      const double d = static_cast<double>(a[k]) - b[k];
      difference += d * d;
      energy += static_cast<double>(b[k]) * b[k];
    }
  }
  const double count = static_cast<double>(tensor.elements());
  return std::make_pair(std::sqrt(difference / count), std::sqrt(energy / count));
}

int inspect_command(const InspectOptions& options) {
  std::shared_ptr<const engine::GgufFile> file = engine::GgufFile::open(options.model);
  std::cout << options.model << ": GGUF v" << file->version() << ", " << file->size() << " bytes, "
            << file->metadata().size() << " metadata entries, " << file->tensors().size()
            << " tensors, alignment " << file->alignment() << "\n\nMetadata:\n";
  for (const auto& [key, value] : file->metadata()) {
    std::cout << "  " << std::left << std::setw(44) << key << value.describe() << "\n";
  }
  std::shared_ptr<const engine::GgufFile> reference;
  if (!options.against.empty()) reference = engine::GgufFile::open(options.against);
  std::cout << "\nTensors:\n";
  for (const auto& tensor : file->tensors()) {
    std::cout << "  " << std::left << std::setw(32) << tensor.name << std::setw(8)
              << kernels::to_string(tensor.type) << std::setw(20) << tensor.shape_text()
              << tensor.bytes << " bytes";
    if (reference) {
      const engine::GgufTensorInfo* other = reference->find_tensor(tensor.name);
      auto rms = other ? rms_difference(tensor, *other) : std::nullopt;
      if (rms) {
        std::cout << "  rms difference " << std::scientific << std::setprecision(6) << rms->first
                  << " (" << std::fixed << std::setprecision(3)
                  << (rms->second > 0 ? 100 * rms->first / rms->second : 0) << "% of rms)";
        std::cout.unsetf(std::ios::floatfield);
      } else {
        std::cout << "  (no comparable tensor in " << options.against << ")";
      }
    }
    std::cout << "\n";
    if (!options.all_tensors && &tensor - file->tensors().data() >= 40) {
      std::cout << "  ... " << file->tensors().size() - 41 << " more (--all-tensors)\n";
      break;
    }
  }
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<InspectOptions>();
  auto* command = app.add_subcommand("inspect", "Show a GGUF file's metadata and tensors");
  command->add_option("model", options->model, "GGUF file")->required();
  command->add_flag("--all-tensors", options->all_tensors, "list every tensor");
  command
      ->add_option("--against", options->against,
                   "a GGUF file with the same tensors: print each one's RMS difference from it")
      ->check(CLI::ExistingFile);
  command->callback(
      [&selected, options] { selected = [options] { return inspect_command(*options); }; });
}

}  // namespace chatflow::cli
