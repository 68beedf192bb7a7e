// chatflow quantize IN OUT TYPE: converts a GGUF model's weight matrices with one of
// llama.cpp's schemes (q4_k_m, q8_0, ...), printing progress and, with --verbose, each
// tensor's error.
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/engine/compute_threads.h"
#include "framework/engine/model_quantizer.h"

namespace chatflow::cli {
namespace {

struct QuantizeCommandOptions {
  std::string input, output, type;
  int threads = 0;
  bool verbose = false;
  bool allow_requantize = false;
};

std::string mebibytes(uint64_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1024.0 * 1024.0)
       << " MiB";
  return text.str();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? " x " : "") + std::to_string(shape[i]);
  return text + "]";
}

void print_tensor(size_t index, size_t count, const engine::TensorQuantization& t) {
  std::ostringstream line;
  line << "[" << std::setw(4) << index + 1 << "/" << count << "] " << std::left << std::setw(34)
       << t.name << std::right << " " << std::setw(14) << shape_text(t.shape) << "  "
       << kernels::to_string(t.from) << " -> " << kernels::to_string(t.to);
  if (t.from != t.to) {
    line << "  rms error " << std::scientific << std::setprecision(6) << t.rms_error << " ("
         << std::fixed << std::setprecision(2) << (t.rms > 0 ? 100 * t.rms_error / t.rms : 0)
         << "% of rms)";
  }
  std::cout << line.str() << "\n";
}

int quantize_command(const QuantizeCommandOptions& options) {
  auto recipe = engine::quantization_recipe(options.type);
  if (!recipe) {
    std::cerr << "chatflow: quantize: unknown type '" << options.type
              << "' (expected one of: " << engine::quantization_recipe_names() << ")\n";
    return 2;
  }
  engine::QuantizeOptions settings;
  settings.recipe = *recipe;
  // 0: the CPUs this process may use (affinity mask, cgroup CPU quota).
  settings.threads = options.threads > 0 ? options.threads : engine::available_cpus();
  settings.allow_requantize = options.allow_requantize;
  const bool terminal = isatty(STDERR_FILENO);
  const auto started = std::chrono::steady_clock::now();
  uint64_t done_bytes = 0;
  auto report = engine::quantize_model(
      options.input, options.output, settings,
      [&](size_t index, size_t count, const engine::TensorQuantization& tensor) {
        done_bytes += tensor.bytes_out;
        if (options.verbose) print_tensor(index, count, tensor);
        const int width = 30;
        const int filled = static_cast<int>(width * (index + 1) / count);
        if (terminal || index + 1 == count || (index + 1) % 16 == 0) {
          std::cerr << (terminal ? "\r" : "") << "quantize [" << std::string(filled, '=')
                    << std::string(width - filled, ' ') << "] " << index + 1 << "/" << count
                    << " tensors, " << mebibytes(done_bytes) << (terminal ? "  " : "\n")
                    << std::flush;
        }
      });
  if (terminal) std::cerr << "\n";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double weights = static_cast<double>(report.weights);
  std::cout << options.output << ": " << recipe->name << ", " << mebibytes(report.bytes_in) << " ("
            << std::fixed << std::setprecision(2)
            << 8.0 * static_cast<double>(report.bytes_in) / weights << " bits per weight) -> "
            << mebibytes(report.bytes_out) << " ("
            << 8.0 * static_cast<double>(report.bytes_out) / weights << " bits per weight) in "
            << std::setprecision(1) << seconds << " s\n";
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<QuantizeCommandOptions>();
  auto* command = app.add_subcommand(
      "quantize",
      "Quantise a GGUF model's weights (q4_k_m, q8_0, ... as llama-quantize names them)");
  command->add_option("input", options->input, "GGUF model to read (f32, f16 or bf16)")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("output", options->output, "GGUF file to write")->required();
  command->add_option("type", options->type, engine::quantization_recipe_names())->required();
  command->add_option("--threads", options->threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  command->add_flag("--verbose,-v", options->verbose, "print each tensor's type and error");
  command->add_flag("--allow-requantize", options->allow_requantize,
                    "convert matrices that are already quantised");
  command->callback(
      [&selected, options] { selected = [options] { return quantize_command(*options); }; });
}

}  // namespace chatflow::cli
