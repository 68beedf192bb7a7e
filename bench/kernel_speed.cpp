// `chatflow bench-kernels`: one quantised matrix product of the kernels this processor selects,
// alone, on random weights: the weights' read rate and the time per 256 values and token. Small
// matrices stay in cache and show what the kernel computes; large ones show how close it comes
// to the memory's pace. One thread, no engine around it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_kernel_table.h"
#include "kernels/quantize.h"
#include "kernels/tensor_type.h"

namespace chatflow::cli {
namespace {

struct BenchKernelsOptions {
  std::string type = "q4_k";
  std::vector<int64_t> rows = {256, 65536};
  int64_t columns = 2048;
  std::vector<int64_t> tokens = {1, 8, 32};
  double seconds = 1.0;
};

int bench_kernels_command(const BenchKernelsOptions& options) {
  const auto type = kernels::tensor_type_from_name(options.type);
  if (!type || kernels::quantized_index(*type) < 0)
    throw std::runtime_error("--type " + options.type +
                             ": not a type with an integer kernel (q4_0, q4_1, q5_0, q5_1, q8_0, "
                             "iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs)");
  const int64_t block = kernels::block_values(*type);
  if (options.columns % 256 != 0 || options.columns % block != 0)
    throw std::runtime_error("--columns " + std::to_string(options.columns) +
                             ": must be a multiple of 256");
  const kernels::CpuKernelTable& table = kernels::cpu_kernels();
  const auto kernel = table.quantized_matmul[kernels::quantized_index(*type)];
  const auto format = kernels::activation_format(*type);
  const kernels::ActivationLayout layout = kernels::activation_layout(format, options.columns);
  const size_t row_bytes = kernels::row_bytes(*type, options.columns);
  std::printf("kernels: %s (quantised: %s), %s, %lld columns, one thread\n\n",
              std::string(table.instruction_set).c_str(),
              std::string(table.quantized_instruction_set).c_str(), options.type.c_str(),
              static_cast<long long>(options.columns));
  std::printf("| rows | weights MB | tokens | weights GB/s | ns per 256 values x token |\n");
  std::printf("|-----:|-----------:|-------:|-------------:|--------------------------:|\n");
  std::mt19937 random(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(options.columns));
  for (const int64_t rows : options.rows) {
    // One quantised random row, repeated: the kernel's work does not depend on the values.
    for (float& value : row)
      value = normal(random);
    std::vector<uint8_t> first(row_bytes);
    kernels::quantize_row(*type, row.data(), options.columns, first.data());
    std::vector<uint8_t> weights(row_bytes * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      std::copy(first.begin(), first.end(),
                weights.begin() + static_cast<std::ptrdiff_t>(r * row_bytes));
    for (const int64_t tokens : options.tokens) {
      std::vector<float> x(static_cast<size_t>(options.columns * tokens));
      for (float& value : x)
        value = normal(random);
      std::vector<uint8_t> activations(layout.token_bytes * static_cast<size_t>(tokens));
      for (int64_t t = 0; t < tokens; ++t)
        table.quantize_activations[static_cast<int>(format)](
            x.data() + t * options.columns, layout,
            activations.data() + static_cast<size_t>(t) * layout.token_bytes);
      std::vector<float> y(static_cast<size_t>(rows * tokens));
      const kernels::QuantizedMatmulArgs args{
          weights.data(),     row_bytes, options.columns, 0,        rows,
          activations.data(), &layout,   tokens,          y.data(), rows};
      kernel(args);  // warm: pages touched, caches filled as they will be
      using Clock = std::chrono::steady_clock;
      int64_t calls = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      while (elapsed < options.seconds) {
        kernel(args);
        ++calls;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      }
      const double per_call = elapsed / static_cast<double>(calls);
      const double units = static_cast<double>(rows) * static_cast<double>(options.columns) /
                           256.0 * static_cast<double>(tokens);
      std::printf("| %lld | %.1f | %lld | %.2f | %.2f |\n", static_cast<long long>(rows),
                  static_cast<double>(weights.size()) / 1e6, static_cast<long long>(tokens),
                  static_cast<double>(weights.size()) / per_call / 1e9, per_call / units * 1e9);
    }
  }
  return 0;
}

}  // namespace

void add_bench_kernels_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<BenchKernelsOptions>();
  auto* command = app.add_subcommand(
      "bench-kernels",
      "Measure one quantised matrix product alone: weight read rate and time per 256 values");
  command->add_option("--type", options->type, "weight type (llama.cpp's name)")
      ->capture_default_str();
  command->add_option("--rows", options->rows, "matrix rows (small: in cache; large: from memory)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  command->add_option("--columns", options->columns, "matrix columns, a multiple of 256")
      ->check(CLI::Range(int64_t{256}, int64_t{1} << 20))
      ->capture_default_str();
  command->add_option("--tokens", options->tokens, "tokens per product")
      ->delimiter(',')
      ->check(CLI::Range(1, 512))
      ->capture_default_str();
  command->add_option("--seconds", options->seconds, "time per measurement")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
  command->callback(
      [&selected, options] { selected = [options] { return bench_kernels_command(*options); }; });
}

}  // namespace chatflow::cli
