// chatflow bench-engine MODEL: prompt processing and generation speed, llama-bench style.
//   ppN: N prompt tokens processed as one batch from an empty cache, tokens/s.
//   tgN: N tokens generated one at a time from an empty cache, tokens/s.
// Each figure is the median of --repetitions runs. The table adds the memory traffic of
// generation (weight bytes x tokens/s) against this machine's measured read bandwidth (the best
// of five 1 GiB sequential reads), and the process's peak resident memory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <immintrin.h>
#include <iostream>
#include <sys/resource.h>
#include <thread>
#include <vector>

#include "framework/cli/commands.h"
#include "framework/engine/transformer.h"

namespace chatflow::cli {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Sums a range with four independent 256-bit accumulators: bound by memory, not by adds.
__attribute__((target("avx2"))) double sum_avx2(const float* data, size_t begin, size_t end) {
  __m256 sums[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                    _mm256_setzero_ps()};
  for (size_t i = begin; i + 32 <= end; i += 32) {
    for (int lane = 0; lane < 4; ++lane)
      sums[lane] =
          _mm256_add_ps(sums[lane], _mm256_loadu_ps(data + i + 8 * static_cast<size_t>(lane)));
  }
  alignas(32) float out[8];
  _mm256_store_ps(out,
                  _mm256_add_ps(_mm256_add_ps(sums[0], sums[1]), _mm256_add_ps(sums[2], sums[3])));
  double total = 0;
  for (float value : out)
    total += value;
  return total;
}

double sum_portable(const float* data, size_t begin, size_t end) {
  float partial[8] = {};
  for (size_t i = begin; i + 8 <= end; i += 8) {
    for (int lane = 0; lane < 8; ++lane)
      partial[lane] += data[i + static_cast<size_t>(lane)];
  }
  double total = 0;
  for (float value : partial)
    total += value;
  return total;
}

// Sequential read bandwidth over a buffer far larger than the caches, split over `threads`.
double measure_read_bandwidth(int threads) {
  const size_t floats = size_t{256} << 20;  // 1 GiB
  std::vector<float> buffer(floats, 1.0f);
  bool avx2 = __builtin_cpu_supports("avx2");
  std::vector<double> rates;
  for (int repetition = 0; repetition < 5; ++repetition) {
    std::vector<double> sums(static_cast<size_t>(threads));
    auto start = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        size_t begin = floats / static_cast<size_t>(threads) * static_cast<size_t>(t);
        size_t end = floats / static_cast<size_t>(threads) * static_cast<size_t>(t + 1);
        sums[static_cast<size_t>(t)] =
            avx2 ? sum_avx2(buffer.data(), begin, end) : sum_portable(buffer.data(), begin, end);
      });
    }
    for (auto& worker : workers)
      worker.join();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (sums[0] != static_cast<double>(floats / static_cast<size_t>(threads)))
      std::cerr << "bandwidth probe miscounted\n";
    rates.push_back(static_cast<double>(floats * sizeof(float)) / seconds / 1e9);
  }
  return *std::max_element(rates.begin(), rates.end());
}

struct Figures {
  int threads;
  double pp128, pp512, tg128;
};

class EngineBench {
 public:
  EngineBench(std::shared_ptr<const engine::Model> model, int threads)
      : model_(std::move(model)),
        transformer_(model_),
        threads_(threads),
        cache_(model_->config(), 16, (std::min<int64_t>(model_->config().context, 1024) + 15) / 16),
        logits_(static_cast<size_t>(model_->config().vocabulary)) {}

  // Tokens of ordinary text (not one repeated id), cycled to the length asked for.
  std::vector<engine::TokenId> tokens(int64_t count) const {
    auto text = model_->tokenizer().encode(
        "Once upon a time there was a little robot who wanted to learn how to paint the sea at "
        "night. ",
        false);
    std::vector<engine::TokenId> out;
    while (static_cast<int64_t>(out.size()) < count)
      out.push_back(text[out.size() % text.size()]);
    return out;
  }

  double prompt_rate(int64_t count) {
    auto prompt = tokens(count);
    engine::KvSequence sequence;
    engine::reserve(cache_, sequence, count);
    auto start = Clock::now();
    engine::SequenceChunk chunk{&sequence, prompt, true};
    transformer_.forward({&chunk, 1}, cache_, threads_, logits_);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    engine::release(cache_, sequence);
    return static_cast<double>(count) / seconds;
  }

  double generation_rate(int64_t count) {
    auto inputs = tokens(count);
    engine::KvSequence sequence;
    engine::reserve(cache_, sequence, count);
    auto start = Clock::now();
    for (int64_t i = 0; i < count; ++i) {
      engine::SequenceChunk chunk{&sequence, {&inputs[static_cast<size_t>(i)], 1}, true};
      transformer_.forward({&chunk, 1}, cache_, threads_, logits_);
    }
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    engine::release(cache_, sequence);
    return static_cast<double>(count) / seconds;
  }

 private:
  std::shared_ptr<const engine::Model> model_;
  engine::Transformer transformer_;
  engine::ComputeThreads threads_;
  engine::KvCache cache_;
  std::vector<float> logits_;
};

}  // namespace

int bench_engine_command(const BenchEngineOptions& options) {
  std::shared_ptr<const engine::Model> model;
  try {
    model = engine::Model::load(options.model);
  } catch (const std::exception& error) {
    std::cerr << "chatflow: " << error.what() << "\n";
    return 1;
  }
  const auto& config = model->config();
  if (config.context < 512 + 1) {
    std::cerr << "chatflow: the model's context (" << config.context
              << ") is too short for pp512\n";
    return 1;
  }
  std::vector<Figures> results;
  for (int threads : options.threads) {
    EngineBench bench(model, threads);
    bench.prompt_rate(32);  // warm-up: pages mapped, caches filled
    std::vector<double> pp128, pp512, tg128;
    for (int repetition = 0; repetition < options.repetitions; ++repetition) {
      pp128.push_back(bench.prompt_rate(128));
      pp512.push_back(bench.prompt_rate(512));
      tg128.push_back(bench.generation_rate(128));
    }
    results.push_back({threads, median(pp128), median(pp512), median(tg128)});
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  double peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;

  if (options.json) {
    std::printf("[");
    for (size_t i = 0; i < results.size(); ++i) {
      std::printf("%s{\"threads\": %d, \"pp128\": %.1f, \"pp512\": %.1f, \"tg128\": %.1f}",
                  i ? ", " : "", results[i].threads, results[i].pp128, results[i].pp512,
                  results[i].tg128);
    }
    std::printf("]\n");
    return 0;
  }
  double weight_gb = static_cast<double>(model->weight_bytes()) / 1e9;
  std::printf(
      "model: %s (%s, dim %lld, %lld layers, vocabulary %lld, %.1f MB of weights), kernels: %s\n",
      options.model.c_str(), config.architecture.c_str(), static_cast<long long>(config.dim),
      static_cast<long long>(config.layers), static_cast<long long>(config.vocabulary),
      weight_gb * 1e3, std::string(kernels::cpu_kernels().instruction_set).c_str());
  std::printf("median of %d runs\n\n", options.repetitions);
  std::printf("| threads |  pp128 t/s |  pp512 t/s |  tg128 t/s | tg weight reads GB/s |\n");
  std::printf("|--------:|-----------:|-----------:|-----------:|---------------------:|\n");
  for (const auto& figures : results) {
    std::printf("| %7d | %10.1f | %10.1f | %10.1f | %20.2f |\n", figures.threads, figures.pp128,
                figures.pp512, figures.tg128, weight_gb * figures.tg128);
  }
  if (options.bandwidth) {
    std::printf("\nmeasured memory read bandwidth (1 GiB sequential read):");
    for (int threads : options.threads) {
      double bandwidth = measure_read_bandwidth(threads);
      const Figures* figures = nullptr;
      for (const auto& f : results)
        figures = f.threads == threads ? &f : figures;
      std::printf("\n  %d thread%s: %.2f GB/s; generation reads weights at %.0f%% of it", threads,
                  threads == 1 ? "" : "s", bandwidth,
                  figures ? 100.0 * weight_gb * figures->tg128 / bandwidth : 0.0);
    }
    std::printf("\n");
  }
  std::printf("\npeak resident memory: %.1f MiB (weights are memory-mapped and never expanded)\n",
              peak_mib);
  return 0;
}

}  // namespace chatflow::cli
