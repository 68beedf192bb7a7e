// chatflow bench-engine MODEL: prompt processing and generation speed, llama-bench style.
//   ppN: N prompt tokens processed as one batch from an empty cache, tokens/s.
//   tgN: N tokens generated one at a time from an empty cache, tokens/s.
// Each figure is the median of --repetitions runs. The table adds the memory traffic of
// generation (weight bytes x tokens/s) against this machine's measured read bandwidth (the best
// of five 1 GiB sequential reads), and the process's peak resident memory. With
// --compare-llama-cpp DIR, DIR/llama-bench measures the same file with the same thread counts
// and repetitions in the same run, right after chatflow at each thread count, and the table
// gives each ratio.
#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <immintrin.h>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "framework/cli/command.h"
#include "framework/engine/backend.h"
#include "framework/engine/scheduler.h"

namespace chatflow::cli {
namespace {

struct BenchEngineOptions {
  std::string model;
  std::vector<int> threads = {1, 2};
  std::vector<int> concurrency;  // when set: continuous-batching throughput instead of pp/tg
  int repetitions = 5;
  bool json = false;
  bool bandwidth = false;
  std::string llama_cpp_bin;    // a folder holding llama-bench: measured side by side
  std::string llama_cpp_args;   // more llama-bench options (ik_llama.cpp's -rtr 1 -fa 1)
  std::string kv_type = "f16";  // how the KV pool stores keys and values
  int64_t depth = 0;            // tokens already in the context when each figure is measured
  std::string backend = "cpu";  // where the model computes (make_backend: cpu, cuda, auto)
};

kernels::KvType kv_type_named(const std::string& name) {
  if (name == "f32") return kernels::KvType::f32;
  if (name == "q8_0") return kernels::KvType::q8_0;
  return kernels::KvType::f16;
}

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

std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// llama-bench's figures for the same file: its JSON output, one record per test.
Figures run_llama_bench(const std::string& bin, const std::string& model, int threads,
                        int repetitions, const std::string& extra_args) {
  // The extra options are the user's own words for their own shell, as they would type them.
  const std::string command = shell_quoted(bin + "/llama-bench") + " -m " + shell_quoted(model) +
                              " -t " + std::to_string(threads) + " -p 128,512 -n 128 -r " +
                              std::to_string(repetitions) + " " + extra_args +
                              " -o json 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string output;
  std::array<char, 4096> buffer{};
  for (size_t n; (n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0;)
    output.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (status != 0)
    throw std::runtime_error(command + " failed (status " + std::to_string(status) + ")");
  Figures figures{threads, 0, 0, 0};
  boost::system::error_code error;
  auto parsed = boost::json::parse(output, error);
  if (error || !parsed.is_array())
    throw std::runtime_error(command + " did not print a JSON array of results");
  for (const auto& record : parsed.as_array()) {
    const auto* fields = record.if_object();
    if (!fields || !fields->contains("n_prompt") || !fields->contains("avg_ts")) continue;
    const int64_t prompt = fields->at("n_prompt").to_number<int64_t>();
    const int64_t generated = fields->at("n_gen").to_number<int64_t>();
    const double rate = fields->at("avg_ts").to_number<double>();
    double* figure = prompt == 128 && generated == 0   ? &figures.pp128
                     : prompt == 512 && generated == 0 ? &figures.pp512
                     : prompt == 0 && generated == 128 ? &figures.tg128
                                                       : nullptr;
    if (!figure) continue;
    // Options with several values (-fa 0,1) give several records per test: which one is meant?
    if (*figure != 0) {
      throw std::runtime_error(command +
                               " printed several results for one test: give each option in "
                               "--compare-args a single value");
    }
    *figure = rate;
  }
  if (figures.pp128 == 0 || figures.pp512 == 0 || figures.tg128 == 0)
    throw std::runtime_error(command + " did not report pp128, pp512 and tg128");
  return figures;
}

void print_comparison(const std::vector<Figures>& ours, const std::vector<Figures>& theirs,
                      const std::string& bin, const std::string& extra_args) {
  std::printf("\nside by side with %s/llama-bench%s%s (mean of the same number of runs):\n\n",
              bin.c_str(), extra_args.empty() ? "" : " ", extra_args.c_str());
  std::printf("| threads | test  |  chatflow t/s | llama.cpp t/s | chatflow / llama.cpp |\n");
  std::printf("|--------:|:------|--------------:|--------------:|---------------------:|\n");
  for (size_t i = 0; i < ours.size(); ++i) {
    const std::pair<const char*, double Figures::*> tests[] = {
        {"pp128", &Figures::pp128}, {"pp512", &Figures::pp512}, {"tg128", &Figures::tg128}};
    for (const auto& [name, field] : tests) {
      std::printf("| %7d | %-5s | %13.1f | %13.1f | %19.2fx |\n", ours[i].threads, name,
                  ours[i].*field, theirs[i].*field, ours[i].*field / theirs[i].*field);
    }
  }
}

class EngineBench {
 public:
  // With `depth`, every figure is measured after that many tokens already in the context (as
  // llama-bench -d): they are computed once, and each measured sequence shares their blocks.
  EngineBench(std::shared_ptr<const engine::Model> model, int threads,
              kernels::KvType kv_type = kernels::KvType::f16, int64_t depth = 0,
              const std::string& backend = "cpu")
      : model_(std::move(model)),
        backend_(engine::make_backend(backend, model_, {threads})),
        blocks_(16, (std::min<int64_t>(model_->config().context, depth + 1024) + 15) / 16) {
    backend_->allocate_kv_pool({blocks_.total_blocks(), blocks_.block_tokens(), kv_type});
    if (depth > 0) {
      auto context = tokens(depth);
      engine::reserve(blocks_, depth_, depth);
      for (int64_t begin = 0; begin < depth; begin += 512)
        step(depth_, std::span(context).subspan(
                         static_cast<size_t>(begin),
                         static_cast<size_t>(std::min<int64_t>(512, depth - begin))));
    }
  }

  engine::BackendInfo info() const { return backend_->info(); }

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
    engine::KvSequence sequence = after_depth();
    engine::reserve(blocks_, sequence, sequence.length + count);
    auto start = Clock::now();
    step(sequence, prompt);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    engine::release(blocks_, sequence);
    return static_cast<double>(count) / seconds;
  }

  double generation_rate(int64_t count) {
    auto inputs = tokens(count);
    engine::KvSequence sequence = after_depth();
    engine::reserve(blocks_, sequence, sequence.length + count);
    auto start = Clock::now();
    for (int64_t i = 0; i < count; ++i)
      step(sequence, {&inputs[static_cast<size_t>(i)], 1});
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    engine::release(blocks_, sequence);
    return static_cast<double>(count) / seconds;
  }

 private:
  // A sequence holding the depth's tokens in shared blocks. Positions from the depth on, which it
  // writes into the last shared block when the depth is not whole blocks, are never read by
  // the depth itself.
  engine::KvSequence after_depth() {
    engine::KvSequence sequence = depth_;
    for (engine::BlockId block : sequence.blocks)
      blocks_.retain(block);
    return sequence;
  }

  // One step of `tokens` at the end of `sequence`, its last logits row copied back (as a
  // caller that samples on the host would have it).
  void step(engine::KvSequence& sequence, std::span<const engine::TokenId> tokens) {
    engine::StepChunk chunk;
    chunk.tokens = tokens;
    chunk.start = sequence.length;
    chunk.block_table = sequence.blocks;
    chunk.want = engine::StepChunk::Want::logits;
    backend_->forward({&chunk, 1}, output_);
    sequence.length += static_cast<int64_t>(tokens.size());
  }

  std::shared_ptr<const engine::Model> model_;
  std::unique_ptr<engine::Backend> backend_;
  engine::KvBlockAllocator blocks_;
  engine::StepOutput output_;
  engine::KvSequence depth_;
};

// Records when each token of one sequence arrived.
class TimingObserver final : public engine::SequenceObserver {
 public:
  void on_token(const engine::SampledToken&, bool, const engine::SequenceUsage&) override {
    std::lock_guard lock(mutex_);
    times_.push_back(Clock::now());
  }
  void on_finish(engine::FinishCause, const engine::SequenceUsage&) override { done(); }
  void on_error(const std::string& message) override {
    std::cerr << "bench sequence failed: " << message << "\n";
    done();
  }
  bool cancelled() const override { return false; }

  void wait() {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [this] { return done_; });
  }
  std::vector<Clock::time_point> times() const {
    std::lock_guard lock(mutex_);
    return times_;
  }

 private:
  void done() {
    std::lock_guard lock(mutex_);
    done_ = true;
    finished_.notify_all();
  }
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  std::vector<Clock::time_point> times_;
  bool done_ = false;
};

struct ConcurrencyFigures {
  int concurrency;
  double tokens_per_second;  // all sequences together
  double inter_token_ms;     // mean gap between one sequence's tokens
  double first_token_ms;     // mean time to first token
};

// `concurrency` sequences of `new_tokens` each, all submitted at once to one scheduler.
ConcurrencyFigures measure_concurrency(const std::shared_ptr<const engine::Model>& model,
                                       int threads, int concurrency, int64_t new_tokens,
                                       const std::string& backend) {
  engine::SchedulerConfig config;
  config.backend = backend;
  config.threads = threads;
  config.max_seqs = std::max(concurrency, 1);
  config.prefix_cache = false;
  engine::Scheduler scheduler(model, config);
  // Short prompts, as in chat turns: the figure is about generation. Eight tokens of text and one
  // that differs per sequence.
  auto text = model->tokenizer().encode("Once upon a time there was a little robot", true);
  text.resize(std::min<size_t>(text.size(), 8));
  std::vector<std::shared_ptr<TimingObserver>> observers;
  auto start = Clock::now();
  for (int i = 0; i < concurrency; ++i) {
    engine::SequenceSpec spec;
    spec.prompt = text;
    spec.prompt.push_back(text[static_cast<size_t>(i) % text.size()]);  // distinct prompts
    spec.sampling.temperature = 0;
    spec.max_tokens = new_tokens;
    spec.ignore_eos = true;
    observers.push_back(std::make_shared<TimingObserver>());
    if (auto error = scheduler.submit(spec, observers.back())) throw std::runtime_error(*error);
  }
  for (auto& observer : observers)
    observer->wait();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  double gaps = 0, firsts = 0;
  for (auto& observer : observers) {
    auto times = observer->times();
    firsts += std::chrono::duration<double, std::milli>(times.front() - start).count();
    gaps += std::chrono::duration<double, std::milli>(times.back() - times.front()).count() /
            static_cast<double>(times.size() - 1);
  }
  return {concurrency, static_cast<double>(concurrency * new_tokens) / seconds, gaps / concurrency,
          firsts / concurrency};
}

// Time to the first token of a prompt whose first `prefix` tokens are (or are not) cached.
std::pair<double, double> measure_prefix_reuse(const std::shared_ptr<const engine::Model>& model,
                                               int threads, int64_t prefix,
                                               const std::string& backend) {
  engine::SchedulerConfig config;
  config.backend = backend;
  config.threads = threads;
  engine::Scheduler scheduler(model, config);
  auto text = model->tokenizer().encode(
      "The quick brown fox jumps over the lazy dog while the cat watches. ", false);
  std::vector<engine::TokenId> shared;
  while (static_cast<int64_t>(shared.size()) < prefix)
    shared.push_back(text[shared.size() % text.size()]);
  auto first_token_ms = [&](engine::TokenId suffix) {
    engine::SequenceSpec spec;
    spec.prompt = shared;
    for (int i = 0; i < 8; ++i)
      spec.prompt.push_back(suffix);
    spec.sampling.temperature = 0;
    spec.max_tokens = 1;
    spec.ignore_eos = true;
    auto observer = std::make_shared<TimingObserver>();
    auto start = Clock::now();
    if (auto error = scheduler.submit(spec, observer)) throw std::runtime_error(*error);
    observer->wait();
    return std::chrono::duration<double, std::milli>(observer->times().front() - start).count();
  };
  std::vector<double> cold, warm;
  for (int repetition = 0; repetition < 5; ++repetition) {
    engine::TokenId salt_token = text[static_cast<size_t>(repetition) % text.size()];
    // A different first token per repetition keeps the cold run cold.
    shared[0] = salt_token + repetition;
    cold.push_back(first_token_ms(text[1]));
    warm.push_back(first_token_ms(text[2]));
  }
  return {median(cold), median(warm)};
}

// Continuous batching: aggregate throughput at each --concurrency, and prefix-cache reuse.
int report_concurrency(const BenchEngineOptions& options,
                       const std::shared_ptr<const engine::Model>& model) {
  int threads = options.threads.front();
  // Rounds of every concurrency in turn, so that each ratio to one sequence compares runs made
  // seconds apart: on a shared machine the memory bandwidth a single sequence gets drifts.
  const size_t levels = options.concurrency.size();
  std::vector<std::vector<double>> rates(levels), gaps(levels), firsts(levels), ratios(levels);
  for (int round = 0; round < options.repetitions; ++round) {
    for (size_t level = 0; level < levels; ++level) {
      ConcurrencyFigures f =
          measure_concurrency(model, threads, options.concurrency[level], 128, options.backend);
      rates[level].push_back(f.tokens_per_second);
      gaps[level].push_back(f.inter_token_ms);
      firsts[level].push_back(f.first_token_ms);
      ratios[level].push_back(f.tokens_per_second / rates[0].back());
    }
  }
  std::vector<ConcurrencyFigures> figures;
  for (size_t level = 0; level < levels; ++level) {
    figures.push_back({options.concurrency[level], median(rates[level]), median(gaps[level]),
                       median(firsts[level])});
  }
  auto [cold, warm] = measure_prefix_reuse(model, threads, 512, options.backend);
  if (options.json) {
    std::printf("{\"threads\": %d, \"concurrency\": [", threads);
    for (size_t i = 0; i < figures.size(); ++i) {
      std::printf(
          "%s{\"sequences\": %d, \"tokens_per_s\": %.1f, \"x_one_sequence\": %.2f, "
          "\"x_one_sequence_min\": %.2f, \"x_one_sequence_max\": %.2f, "
          "\"inter_token_ms\": %.3f, \"first_token_ms\": %.2f}",
          i ? ", " : "", figures[i].concurrency, figures[i].tokens_per_second, median(ratios[i]),
          *std::min_element(ratios[i].begin(), ratios[i].end()),
          *std::max_element(ratios[i].begin(), ratios[i].end()), figures[i].inter_token_ms,
          figures[i].first_token_ms);
    }
    std::printf("], \"prefix512_cold_ms\": %.2f, \"prefix512_cached_ms\": %.2f}\n", cold, warm);
    return 0;
  }
  std::printf(
      "model: %s, %d thread%s, 128 new tokens per sequence, greedy; medians of %d rounds\n\n",
      options.model.c_str(), threads, threads == 1 ? "" : "s", options.repetitions);
  std::printf(
      "| sequences | aggregate t/s | x one sequence (range) | inter-token ms | first token ms "
      "|\n");
  std::printf(
      "|----------:|--------------:|-----------------------:|---------------:|---------------:"
      "|\n");
  for (size_t level = 0; level < levels; ++level) {
    const auto& f = figures[level];
    const auto& r = ratios[level];
    std::printf("| %9d | %13.1f | %6.2f (%5.2f-%5.2f) | %14.3f | %14.2f |\n", f.concurrency,
                f.tokens_per_second, median(r), *std::min_element(r.begin(), r.end()),
                *std::max_element(r.begin(), r.end()), f.inter_token_ms, f.first_token_ms);
  }
  std::printf(
      "\nprefix cache: time to first token of a 512-token shared prefix + 8 new tokens:\n"
      "  cold %.2f ms, prefix cached %.2f ms: %.1f%% less\n"
      "(x one sequence: the median, lowest and highest of each round's ratio to that round's\n"
      " single sequence; first token ms: mean over sequences; all prompts arrive at once, 9\n"
      " tokens each)\n",
      cold, warm, 100.0 * (1.0 - warm / cold));
  return 0;
}

int bench_engine_command(const BenchEngineOptions& options) {
  std::shared_ptr<const engine::Model> model = engine::Model::load(options.model);
  const auto& config = model->config();
  if (!options.concurrency.empty()) return report_concurrency(options, model);
  if (config.context < options.depth + 512 + 1) {
    std::cerr << "chatflow: the model's context (" << config.context << ") is too short for "
              << (options.depth > 0 ? "--depth " + std::to_string(options.depth) + " + " : "")
              << "pp512\n";
    return 1;
  }
  std::vector<Figures> results, llama_cpp;
  std::string backend;
  for (int threads : options.threads) {
    EngineBench bench(model, threads, kv_type_named(options.kv_type), options.depth,
                      options.backend);
    if (backend.empty()) backend = bench.info().name + ": " + bench.info().device;
    bench.prompt_rate(32);  // warm-up: pages mapped, caches filled
    std::vector<double> pp128, pp512, tg128;
    for (int repetition = 0; repetition < options.repetitions; ++repetition) {
      pp128.push_back(bench.prompt_rate(128));
      pp512.push_back(bench.prompt_rate(512));
      tg128.push_back(bench.generation_rate(128));
    }
    results.push_back({threads, median(pp128), median(pp512), median(tg128)});
    if (!options.llama_cpp_bin.empty()) {
      llama_cpp.push_back(run_llama_bench(options.llama_cpp_bin, options.model, threads,
                                          options.repetitions, options.llama_cpp_args));
    }
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  double peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;

  if (options.json) {
    std::printf("[");
    for (size_t i = 0; i < results.size(); ++i) {
      std::printf("%s{\"threads\": %d, \"pp128\": %.1f, \"pp512\": %.1f, \"tg128\": %.1f",
                  i ? ", " : "", results[i].threads, results[i].pp128, results[i].pp512,
                  results[i].tg128);
      if (!llama_cpp.empty()) {
        // Which llama-bench, with which options: the reference may be llama.cpp or ik_llama.cpp.
        std::printf(
            ", \"llama_cpp\": {\"pp128\": %.1f, \"pp512\": %.1f, \"tg128\": %.1f, "
            "\"bin\": %s, \"args\": %s}",
            llama_cpp[i].pp128, llama_cpp[i].pp512, llama_cpp[i].tg128,
            boost::json::serialize(boost::json::value(options.llama_cpp_bin)).c_str(),
            boost::json::serialize(boost::json::value(options.llama_cpp_args)).c_str());
      }
      std::printf("}");
    }
    std::printf("]\n");
    return 0;
  }
  double weight_gb = static_cast<double>(model->weight_bytes()) / 1e9;
  std::printf(
      "model: %s (%s, dim %lld, %lld layers, vocabulary %lld, %.1f MB of weights), backend %s\n",
      options.model.c_str(), config.architecture.c_str(), static_cast<long long>(config.dim),
      static_cast<long long>(config.layers), static_cast<long long>(config.vocabulary),
      weight_gb * 1e3, backend.c_str());
  std::printf("median of %d runs, KV cache %s", options.repetitions, options.kv_type.c_str());
  if (options.depth > 0)
    std::printf(", every figure after %lld tokens of context",
                static_cast<long long>(options.depth));
  std::printf("\n\n");
  std::printf("| threads |  pp128 t/s |  pp512 t/s |  tg128 t/s | tg weight reads GB/s |\n");
  std::printf("|--------:|-----------:|-----------:|-----------:|---------------------:|\n");
  for (const auto& figures : results) {
    std::printf("| %7d | %10.1f | %10.1f | %10.1f | %20.2f |\n", figures.threads, figures.pp128,
                figures.pp512, figures.tg128, weight_gb * figures.tg128);
  }
  const bool on_device = backend.rfind("cpu:", 0) != 0;
  if (options.bandwidth && on_device) {
    std::string error;
    const auto bandwidth = engine::measure_device_bandwidth(options.backend, error);
    if (!bandwidth) {
      std::printf("\ndevice memory bandwidth not measured: %s\n", error.c_str());
    } else {
      std::printf(
          "\nmeasured device memory read bandwidth (2 GiB read): %.1f GB/s; generation "
          "reads weights at %.0f%% of it\n",
          *bandwidth, 100.0 * weight_gb * results.front().tg128 / *bandwidth);
    }
  } else if (options.bandwidth) {
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
  std::printf(
      "\npeak resident memory: %.1f MiB (weights held once, in their file's type: the packed copy "
      "replaces the mapped pages)\n",
      peak_mib);
  if (!llama_cpp.empty())
    print_comparison(results, llama_cpp, options.llama_cpp_bin, options.llama_cpp_args);
  return 0;
}

}  // namespace

void add_bench_engine_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<BenchEngineOptions>();
  auto* command = app.add_subcommand("bench-engine",
                                     "Prompt and generation speed of a model (llama-bench style)");
  command->add_option("model", options->model, "GGUF file")->required();
  command->add_option("--threads", options->threads, "thread counts to measure")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command->add_option("--repetitions", options->repetitions, "runs per figure (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  command->add_flag("--json", options->json, "print JSON instead of a table");
  command->add_flag("--bandwidth", options->bandwidth, "also measure memory read bandwidth");
  command
      ->add_option("--backend", options->backend,
                   "where the model computes: cpu, cuda (a build with CUDA, on a GPU) or auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  command->add_option("--kv-type", options->kv_type, "how the KV cache stores keys and values")
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}))
      ->capture_default_str();
  command
      ->add_option("--depth", options->depth,
                   "tokens already in the context before each figure (as llama-bench -d): "
                   "decode speed at a long context")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  command
      ->add_option(
          "--concurrency", options->concurrency,
          "sequences decoded together (e.g. 1,8,32): batching throughput and prefix-cache reuse")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  auto* compare =
      command
          ->add_option(
              "--compare-llama-cpp", options->llama_cpp_bin,
              "a folder with llama.cpp's (or ik_llama.cpp's) llama-bench: measure the same "
              "file with it in the same run and print the ratios")
          ->check(CLI::ExistingDirectory);
  command
      ->add_option("--compare-args", options->llama_cpp_args,
                   "more options for that llama-bench, e.g. \"-rtr 1 -fa 1\" (ik_llama.cpp's "
                   "run-time repacking and flash attention)")
      ->needs(compare);
  command->callback(
      [&selected, options] { selected = [options] { return bench_engine_command(*options); }; });
}

}  // namespace chatflow::cli
