// chatflow bench-grammar: the per-token cost of grammar-constrained decoding. A vocabulary is read
// from a GGUF file (control tokens never allowed), and for a few JSON Schemas (a flat object, a
// nested array of objects, a tool call) seeded random generations pick uniformly among the
// allowed tokens until the text is complete. Each step times the mask (a cache lookup, or the
// trie walk on a first visit) plus applying it to a logit array of the vocabulary's size. With
// --model, a model's own decode steps follow, through the scheduler, unconstrained and under the
// tool-call schema, so the mask's cost is seen beside the step it rides on.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <iomanip>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "framework/cli/command.h"
#include "framework/engine/compute_threads.h"
#include "framework/engine/gguf_file.h"
#include "framework/engine/grammar_constraint.h"
#include "framework/engine/model.h"
#include "framework/engine/scheduler.h"
#include "framework/engine/tokenizer.h"
#include "framework/grammar/grammar.h"
#include "framework/grammar/matcher.h"
#include "framework/grammar/token_masker.h"

namespace chatflow::cli {
namespace {

struct BenchGrammarOptions {
  std::string vocabulary = "../shared/models/vocab/ggml-vocab-llama-spm.gguf";
  int generations = 20;
  int max_tokens = 512;
  unsigned seed = 1;
  size_t cache_states = 4096;
  std::string model;  // also time this model's decode steps with and without the grammar
  int threads = 0;
  int decode_tokens = 64;
};

struct NamedSchema {
  const char* name;
  const char* schema;
};

const NamedSchema kSchemas[] = {
    {"flat object",
     R"({"type":"object","properties":{"name":{"type":"string","maxLength":24},
         "age":{"type":"integer","minimum":0,"maximum":150},
         "role":{"enum":["admin","user","guest"]},"active":{"type":"boolean"},
         "email":{"type":"string","maxLength":40}},
         "required":["name","age","role","active"],"additionalProperties":false})"},
    {"nested array",
     R"({"type":"object","properties":{"items":{"type":"array","maxItems":5,"items":{
         "type":"object","properties":{"id":{"type":"integer","minimum":1,"maximum":100000},
         "label":{"type":"string","maxLength":20},
         "tags":{"type":"array","maxItems":3,"items":{"type":"string","maxLength":10}}},
         "required":["id","label","tags"],"additionalProperties":false}}},
         "required":["items"],"additionalProperties":false})"},
    {"tool call",
     R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{
         "type":"object","properties":{"location":{"type":"string","maxLength":32},
         "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},
         "required":["location","unit","days"],"additionalProperties":false}},
         "required":["name","arguments"],"additionalProperties":false})"},
};

double percentile(std::vector<double> samples, double fraction) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  size_t index = static_cast<size_t>(fraction * static_cast<double>(samples.size() - 1));
  return samples[index];
}

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

// Times one sequence's tokens as the engine thread produces them.
class StepClock final : public engine::SequenceObserver {
 public:
  void on_token(const engine::SampledToken&, bool, const engine::SequenceUsage&) override {
    std::lock_guard lock(mutex_);
    times_.push_back(std::chrono::steady_clock::now());
  }
  void on_finish(engine::FinishCause, const engine::SequenceUsage&) override { done(); }
  void on_error(const std::string& message) override {
    error_ = message;
    done();
  }
  bool cancelled() const override { return false; }

  // Milliseconds per decode step (the first token, prefill's, left out); throws on an error.
  double wait_ms_per_step() {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [this] { return done_; });
    if (!error_.empty()) throw std::runtime_error(error_);
    if (times_.size() < 2) return 0;
    return std::chrono::duration<double, std::milli>(times_.back() - times_.front()).count() /
           static_cast<double>(times_.size() - 1);
  }
  size_t tokens() const { return times_.size(); }

 private:
  void done() {
    std::lock_guard lock(mutex_);
    done_ = true;
    finished_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable finished_;
  std::vector<std::chrono::steady_clock::time_point> times_;
  std::string error_;
  bool done_ = false;
};

// A model's single-sequence decode step, free and under the tool-call schema (seeded sampling,
// so a random-weight model wanders through the grammar's states), taking turns.
int bench_decode_steps(const BenchGrammarOptions& options) {
  auto model = engine::Model::load(options.model);
  engine::SchedulerConfig config;
  config.threads = options.threads > 0 ? options.threads : engine::available_cpus();
  engine::Scheduler scheduler(model, config);
  const engine::Tokenizer& tokenizer = model->tokenizer();
  const auto& ends = tokenizer.vocabulary().end_of_generation;
  auto masks = std::make_shared<engine::GrammarMasks>(
      grammar::compile_json_schema(boost::json::parse(kSchemas[2].schema)),
      engine::token_table_of(tokenizer), std::vector<engine::TokenId>(ends.begin(), ends.end()));
  std::vector<double> free_ms, constrained_ms;
  size_t constrained_tokens = 0;
  for (int round = 0; round < 6; ++round) {
    for (bool constrained : {false, true}) {
      engine::SequenceSpec spec;
      spec.prompt = tokenizer.encode("What is the weather in Oslo this week?", true);
      spec.sampling.seed = options.seed + static_cast<unsigned>(round);
      spec.max_tokens = options.decode_tokens;
      spec.ignore_eos = !constrained;
      if (constrained) spec.constraint = masks->start({});
      auto clock = std::make_shared<StepClock>();
      if (auto error = scheduler.submit(spec, clock)) throw std::runtime_error(*error);
      double ms = clock->wait_ms_per_step();
      if (round == 0) continue;  // warm-up: first touches of the weights and the masks
      (constrained ? constrained_ms : free_ms).push_back(ms);
      if (constrained) constrained_tokens += clock->tokens();
    }
  }
  double free_median = percentile(free_ms, 0.5);
  double constrained_median = percentile(constrained_ms, 0.5);
  std::cout << "\nmodel " << options.model << ", " << config.threads
            << " threads, one sequence, 5 rounds after a warm-up:\n"
            << "  decode step, unconstrained:          " << std::setprecision(3) << free_median
            << " ms\n"
            << "  decode step, under the tool schema:  " << constrained_median << " ms ("
            << constrained_tokens / 5 << " tokens per answer)\n"
            << "  difference: " << std::setprecision(1)
            << 100.0 * (constrained_median - free_median) / free_median << "% of the step\n";
  return 0;
}

int bench_grammar_command(const BenchGrammarOptions& options) {
  auto load_start = std::chrono::steady_clock::now();
  engine::Tokenizer vocabulary_tokenizer(engine::Vocabulary::from_gguf(
      *engine::GgufFile::open(options.model.empty() ? options.vocabulary : options.model)));
  const engine::Tokenizer& tokenizer = vocabulary_tokenizer;
  size_t vocabulary_size = tokenizer.vocabulary().size();
  auto table = engine::token_table_of(tokenizer);
  std::cout << "vocabulary " << (options.model.empty() ? options.vocabulary : options.model) << ": "
            << vocabulary_size << " tokens, trie of " << table->trie_byte.size()
            << " nodes, built in " << std::fixed << std::setprecision(1) << since(load_start) / 1000
            << " ms\n"
            << options.generations << " seeded random generations per schema (seed " << options.seed
            << "), up to " << options.max_tokens << " tokens each; times in microseconds\n\n";
  std::cout << std::left << std::setw(14) << "schema" << std::right << std::setw(8) << "tokens"
            << std::setw(9) << "build" << std::setw(9) << "median" << std::setw(9) << "p90"
            << std::setw(9) << "p99" << std::setw(9) << "max" << std::setw(11) << "miss med"
            << std::setw(10) << "miss max" << std::setw(9) << "hits" << std::setw(10) << "apply"
            << std::setw(10) << "advance"
            << "\n";

  std::mt19937 random(options.seed);
  std::vector<float> logits(vocabulary_size);
  for (const NamedSchema& named : kSchemas) {
    auto build_start = std::chrono::steady_clock::now();
    auto grammar = grammar::compile_json_schema(boost::json::parse(named.schema));
    grammar::TokenMasker masker(grammar, table, options.cache_states);
    double build_us = since(build_start);
    std::vector<double> step_us, miss_us, apply_us, advance_us;
    int complete = 0;
    for (int generation = 0; generation < options.generations; ++generation) {
      grammar::Matcher state(grammar);
      std::string text;
      for (int step = 0; step < options.max_tokens; ++step) {
        if (state.accepting() && !state.can_continue()) break;
        std::fill(logits.begin(), logits.end(), 0.5f);
        uint64_t misses = masker.stats().misses;
        auto start = std::chrono::steady_clock::now();
        auto mask = masker.allowed(state);
        auto applied = std::chrono::steady_clock::now();
        grammar::apply_mask(*mask, logits.data(), logits.size());
        double apply = since(applied);
        double total = since(start);
        step_us.push_back(total);
        apply_us.push_back(apply);
        if (masker.stats().misses != misses) miss_us.push_back(total);
        std::vector<int32_t> allowed;
        for (size_t id = 0; id < vocabulary_size; ++id)
          if (logits[id] > 0) allowed.push_back(static_cast<int32_t>(id));
        if (allowed.empty()) break;
        int32_t token = allowed[random() % allowed.size()];
        auto advance_start = std::chrono::steady_clock::now();
        const std::string& piece = table->token_bytes[static_cast<size_t>(token)];
        if (!state.advance(piece)) {
          std::cerr << "chatflow: token " << token << " was allowed but does not advance\n";
          return 1;
        }
        advance_us.push_back(since(advance_start));
        text += piece;
      }
      if (state.accepting()) {
        ++complete;
        boost::system::error_code error;
        boost::json::parse(text, error);
        if (error) {
          std::cerr << "chatflow: a complete generation is not JSON: " << text << "\n";
          return 1;
        }
      }
      if (generation == 0) std::cerr << named.name << ", first generation: " << text << "\n";
    }
    auto stats = masker.stats();
    double hit_rate = 100.0 * static_cast<double>(stats.hits) /
                      static_cast<double>(std::max<uint64_t>(1, stats.hits + stats.misses));
    std::cout << std::left << std::setw(14) << named.name << std::right << std::setw(8)
              << step_us.size() << std::setw(9) << std::setprecision(0) << build_us
              << std::setprecision(1) << std::setw(9) << percentile(step_us, 0.5) << std::setw(9)
              << percentile(step_us, 0.9) << std::setw(9) << percentile(step_us, 0.99)
              << std::setw(9) << percentile(step_us, 1.0) << std::setw(11)
              << percentile(miss_us, 0.5) << std::setw(10) << percentile(miss_us, 1.0)
              << std::setw(8) << hit_rate << "%" << std::setw(10) << percentile(apply_us, 0.5)
              << std::setw(10) << percentile(advance_us, 0.5) << "   (" << complete << "/"
              << options.generations << " complete)\n";
  }
  std::cout << "\nmedian/p90/p99/max: mask lookup or computation plus applying it to "
            << vocabulary_size
            << " logits, per generated token; miss: first visits of a state (the trie walk); "
               "hits: cache hit rate; apply: applying alone; advance: Matcher::advance by the "
               "chosen token\n";
  return options.model.empty() ? 0 : bench_decode_steps(options);
}

}  // namespace

void add_bench_grammar_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<BenchGrammarOptions>();
  auto* command = app.add_subcommand(
      "bench-grammar", "Measure grammar-constrained token masks over a GGUF vocabulary");
  command->add_option("--vocabulary", options->vocabulary, "a GGUF file with a tokenizer")
      ->capture_default_str();
  command->add_option("--generations", options->generations, "random generations per schema")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  command->add_option("--max-tokens", options->max_tokens, "tokens per generation at most")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  command->add_option("--seed", options->seed, "the random choice's seed")->capture_default_str();
  command->add_option("--cache-states", options->cache_states, "masks cached per schema")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  command->add_option("--model", options->model,
                      "a GGUF model: its vocabulary for the masks, and its decode step timed "
                      "with and without the grammar");
  command->add_option("--threads", options->threads, "the model's threads (0: every core)")
      ->capture_default_str();
  command->add_option("--decode-tokens", options->decode_tokens, "tokens per timed answer")
      ->check(CLI::Range(2, 100'000))
      ->capture_default_str();
  command->callback(
      [&selected, options] { selected = [options] { return bench_grammar_command(*options); }; });
}

}  // namespace chatflow::cli
