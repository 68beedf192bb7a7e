// chatflow perplexity --model M --file TEXT: llama-perplexity's measurement, with a progress
// line and `perplexity: X ± Y` at the end; --kl-divergence-base saves the log-probabilities
// (or, with --kl-divergence, compares against saved ones).
#include <cstdio>
#include <fstream>
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
#include "framework/engine/perplexity.h"

namespace chatflow::cli {
namespace {

struct PerplexityCommandOptions {
  std::string model, file, base;
  std::string kv_type = "f16";
  int64_t context = 512, batch = 512, chunks = -1;
  int threads = 0;
  bool json = false, compare = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int perplexity_command(const PerplexityCommandOptions& options) {
  if (options.compare && options.base.empty()) {
    std::cerr << "chatflow: perplexity: --kl-divergence needs --kl-divergence-base FILE (the "
                 "log-probabilities saved by a run with only --kl-divergence-base)\n";
    return 2;
  }
  engine::PerplexityOptions settings;
  settings.context = options.context;
  settings.batch = options.batch;
  settings.chunks = options.chunks;
  settings.kv_type = options.kv_type == "f32"    ? kernels::KvType::f32
                     : options.kv_type == "q8_0" ? kernels::KvType::q8_0
                                                 : kernels::KvType::f16;
  // 0: the CPUs this process may use (affinity mask, cgroup CPU quota).
  settings.threads = options.threads > 0 ? options.threads : engine::available_cpus();
  (options.compare ? settings.compare_log_probs : settings.save_log_probs) = options.base;
  const std::string text = read_text(options.file);
  auto model = engine::Model::load(options.model);
  const bool terminal = isatty(STDERR_FILENO);
  auto result = engine::measure_perplexity(
      model, text, settings, [&](int64_t done, int64_t chunks, double estimate) {
        if (!terminal && done != chunks && done % 10 != 0) return;
        std::cerr << (terminal ? "\r" : "") << "perplexity: window " << done << "/" << chunks
                  << ", estimate " << std::fixed << std::setprecision(4) << estimate
                  << (terminal ? "   " : "\n") << std::flush;
      });
  if (terminal) std::cerr << "\n";
  if (options.json) {
    std::printf(
        "{\"context\": %lld, \"chunks\": %lld, \"tokens_scored\": %lld, "
        "\"perplexity\": %.6f, \"uncertainty\": %.6f, \"seconds\": %.3f",
        static_cast<long long>(options.context), static_cast<long long>(result.chunks),
        static_cast<long long>(result.scored), result.perplexity, result.uncertainty,
        result.seconds);
    if (result.compared) {
      std::printf(
          ", \"base_perplexity\": %.6f, \"kl_divergence\": %.8f, "
          "\"kl_divergence_uncertainty\": %.8f, \"top_token_agreement\": %.6f",
          result.base_perplexity, result.kl_divergence, result.kl_uncertainty,
          result.top_token_agreement);
    }
    std::printf("}\n");
    return 0;
  }
  std::cout << std::fixed << std::setprecision(1) << options.model << " on " << options.file << ": "
            << result.chunks << " windows of " << options.context << " tokens, " << result.scored
            << " scored, " << settings.threads
            << (settings.threads == 1 ? " thread, " : " threads, ") << result.seconds << " s\n";
  if (result.compared) {
    std::cout << std::setprecision(6) << "kl-divergence: " << result.kl_divergence << " ± "
              << result.kl_uncertainty << std::setprecision(2) << ", top token agreement "
              << 100 * result.top_token_agreement << "%, perplexity " << std::setprecision(4)
              << result.perplexity << " against " << result.base_perplexity << " (delta "
              << std::showpos << result.perplexity - result.base_perplexity << std::noshowpos
              << ")\n";
  }
  std::cout << std::setprecision(4) << "perplexity: " << result.perplexity << " ± "
            << result.uncertainty << "\n";
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<PerplexityCommandOptions>();
  auto* command =
      app.add_subcommand("perplexity", "A model's perplexity on a text (as llama-perplexity)");
  command->add_option("--model,-m", options->model, "GGUF file")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--file,-f", options->file, "text to score")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--ctx,-c", options->context, "tokens per window")
      ->check(CLI::Range(16, 1 << 20))
      ->capture_default_str();
  command->add_option("--batch,-b", options->batch, "tokens per forward step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command->add_option("--chunks", options->chunks, "score at most this many windows");
  command->add_option("--threads,-t", options->threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  command->add_flag("--json", options->json, "print the result as JSON");
  command
      ->add_option("--kv-type", options->kv_type,
                   "how the KV cache stores keys and values (llama-perplexity -ctk/-ctv)")
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}))
      ->capture_default_str();
  command->add_option("--kl-divergence-base", options->base,
                      "save the scored log-probabilities here (with --kl-divergence: compare "
                      "against them)");
  command->add_flag("--kl-divergence", options->compare,
                    "report KL divergence, top-token agreement and the perplexity change against "
                    "--kl-divergence-base");
  command->callback(
      [&selected, options] { selected = [options] { return perplexity_command(*options); }; });
}

}  // namespace chatflow::cli
