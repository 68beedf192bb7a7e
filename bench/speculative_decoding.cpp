// chatflow bench-speculative: greedy decoding of one prompt with and without speculative decoding
// by prompt lookup (gguf_model's speculative: {kind: ngram}) or, with --draft-model, by a draft
// model ({kind: draft}), alternating the two in one run (the machines are shared and noisy:
// compare the ratio), checking that both give the same tokens.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "framework/cli/command.h"
#include "framework/engine/model.h"
#include "framework/engine/scheduler.h"

namespace chatflow::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchSpeculativeOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  int64_t max_tokens = 256;
  int64_t max_draft = 4;
  int ngram_max = 3;
  int ngram_min = 2;
  std::string draft_model;
  int threads = 2;
  int repetitions = 3;
  bool json = false;
};

// One sequence's tokens and the time from its first token to its end (the decode).
class TimedAnswer final : public engine::SequenceObserver {
 public:
  void on_token(const engine::SampledToken& token, bool first,
                const engine::SequenceUsage&) override {
    std::lock_guard lock(mutex_);
    if (first) first_token_ = Clock::now();
    tokens_.push_back(token.token);
  }
  void on_finish(engine::FinishCause, const engine::SequenceUsage&) override { end(""); }
  void on_error(const std::string& message) override { end(message); }
  bool cancelled() const override { return false; }

  // Waits for the end; the error, or "".
  std::string wait() {
    std::unique_lock lock(mutex_);
    ended_.wait(lock, [this] { return done_; });
    return error_;
  }
  const std::vector<engine::TokenId>& tokens() const { return tokens_; }
  // Tokens after the first, per second of decoding.
  double decode_rate() const {
    const double seconds = std::chrono::duration<double>(last_ - first_token_).count();
    return tokens_.size() > 1 && seconds > 0 ? static_cast<double>(tokens_.size() - 1) / seconds
                                             : 0;
  }

 private:
  void end(const std::string& error) {
    std::lock_guard lock(mutex_);
    last_ = Clock::now();
    error_ = error;
    done_ = true;
    ended_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable ended_;
  std::vector<engine::TokenId> tokens_;
  Clock::time_point first_token_;
  Clock::time_point last_;
  std::string error_;
  bool done_ = false;
};

struct Run {
  double decode_rate = 0;
  std::vector<engine::TokenId> tokens;
  int64_t drafted = 0;
  int64_t accepted = 0;
  int64_t steps = 0;
};

Run run_once(engine::Scheduler& scheduler, const std::vector<engine::TokenId>& prompt,
             int64_t max_tokens) {
  const engine::SchedulerStats before = scheduler.stats();
  engine::SequenceSpec spec;
  spec.prompt = prompt;
  spec.sampling.temperature = 0;
  spec.max_tokens = max_tokens;
  spec.ignore_eos = true;
  spec.cache_salt = std::to_string(Clock::now().time_since_epoch().count());  // no prefix reuse
  auto answer = std::make_shared<TimedAnswer>();
  if (auto refused = scheduler.submit(spec, answer)) throw std::runtime_error(*refused);
  if (std::string error = answer->wait(); !error.empty()) throw std::runtime_error(error);
  const engine::SchedulerStats after = scheduler.stats();
  return {answer->decode_rate(), answer->tokens(), after.drafted_tokens - before.drafted_tokens,
          after.accepted_tokens - before.accepted_tokens, after.steps - before.steps};
}

int bench_speculative(const BenchSpeculativeOptions& options) {
  std::string prompt = options.prompt;
  if (!options.prompt_file.empty()) {
    std::ifstream file(options.prompt_file);
    if (!file) {
      std::cerr << "chatflow bench-speculative: cannot read --prompt-file '" << options.prompt_file
                << "'\n";
      return 2;
    }
    std::stringstream text;
    text << file.rdbuf();
    prompt = text.str();
  }
  auto model = engine::Model::load(options.model);
  const std::vector<engine::TokenId> tokens = model->tokenizer().encode(prompt, true);
  engine::SchedulerConfig plain;
  plain.threads = options.threads;
  plain.max_seqs = 1;
  engine::SchedulerConfig speculative = plain;
  if (options.draft_model.empty()) {
    speculative.prompt_lookup = {.max_draft = options.max_draft,
                                 .longest_ngram = options.ngram_max,
                                 .shortest_ngram = options.ngram_min};
  } else {
    speculative.draft.model = engine::Model::load(options.draft_model);
    speculative.draft.max_draft = options.max_draft;
  }
  engine::Scheduler without(model, plain);
  engine::Scheduler with(model, speculative);
  run_once(without, tokens, 8);  // warm-up: first-touch of weights and buffers
  run_once(with, tokens, 8);
  std::vector<Run> off, on;
  for (int i = 0; i < options.repetitions; ++i) {
    off.push_back(run_once(without, tokens, options.max_tokens));
    on.push_back(run_once(with, tokens, options.max_tokens));
  }
  bool identical = true;
  double off_rate = 0, on_rate = 0;
  int64_t drafted = 0, accepted = 0, steps = 0, generated = 0;
  for (int i = 0; i < options.repetitions; ++i) {
    identical = identical && off[i].tokens == on[i].tokens;
    off_rate += off[i].decode_rate / options.repetitions;
    on_rate += on[i].decode_rate / options.repetitions;
    drafted += on[i].drafted;
    accepted += on[i].accepted;
    steps += on[i].steps;
    generated += static_cast<int64_t>(on[i].tokens.size());
  }
  const double acceptance = drafted > 0 ? static_cast<double>(accepted) / drafted : 0;
  if (options.json) {
    std::cout << boost::json::serialize(boost::json::object{
                     {"prompt_tokens", tokens.size()},
                     {"max_tokens", options.max_tokens},
                     {"threads", options.threads},
                     {"max_draft", options.max_draft},
                     {"draft_model", options.draft_model},
                     {"decode_tokens_per_s_without", off_rate},
                     {"decode_tokens_per_s_with", on_rate},
                     {"speedup", off_rate > 0 ? on_rate / off_rate : 0},
                     {"drafted_tokens", drafted},
                     {"accepted_tokens", accepted},
                     {"acceptance_rate", acceptance},
                     {"tokens_per_step", steps > 0 ? static_cast<double>(generated) / steps : 0},
                     {"identical", identical}})
              << "\n";
  } else {
    std::printf("prompt %zu tokens, %lld generated per run (greedy), %d threads, %d runs each\n",
                tokens.size(), static_cast<long long>(options.max_tokens), options.threads,
                options.repetitions);
    std::printf("%-44s %10.2f\n", "decode tokens/s without speculation:", off_rate);
    std::printf("%-44s %10.2f  (x%.2f)\n",
                options.draft_model.empty() ? "decode tokens/s with prompt lookup:"
                                            : "decode tokens/s with the draft model:",
                on_rate, off_rate > 0 ? on_rate / off_rate : 0);
    std::printf("%-44s %lld of %lld (%.1f%%)\n",
                "guesses the model confirmed:", static_cast<long long>(accepted),
                static_cast<long long>(drafted), 100 * acceptance);
    std::printf("%-44s %.2f\n", "tokens per step (prefill included):",
                steps > 0 ? static_cast<double>(generated) / steps : 0);
    std::printf("%-44s %s\n", "same tokens with and without:", identical ? "yes" : "NO");
  }
  if (!identical) {
    std::cerr << "chatflow bench-speculative: the answers differ with speculation: a defect\n";
    return 1;
  }
  return 0;
}

}  // namespace

void add_bench_speculative_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<BenchSpeculativeOptions>();
  auto* command = app.add_subcommand(
      "bench-speculative",
      "Greedy decoding with and without speculative decoding (prompt lookup or a draft model), "
      "side by side");
  command->add_option("model", options->model, "GGUF file")->required();
  auto* prompt = command->add_option("--prompt", options->prompt, "the text to continue");
  command->add_option("--prompt-file", options->prompt_file, "the text to continue, from a file")
      ->excludes(prompt);
  command->add_option("--max-tokens", options->max_tokens, "tokens generated per run")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  command->add_option("--max-draft", options->max_draft, "tokens guessed per step at most")
      ->check(CLI::Range(int64_t{1}, int64_t{64}))
      ->capture_default_str();
  auto* ngram_max =
      command->add_option("--ngram-max", options->ngram_max, "longest run of last tokens looked up")
          ->check(CLI::Range(1, 16))
          ->capture_default_str();
  auto* ngram_min = command->add_option("--ngram-min", options->ngram_min, "shortest run looked up")
                        ->check(CLI::Range(1, 16))
                        ->capture_default_str();
  command
      ->add_option("--draft-model", options->draft_model,
                   "a GGUF with the model's vocabulary that guesses instead of prompt lookup")
      ->excludes(ngram_max)
      ->excludes(ngram_min);
  command->add_option("--threads", options->threads, "compute threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  command->add_option("--repetitions", options->repetitions, "runs of each, alternating")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  command->add_flag("--json", options->json, "print JSON instead of a table");
  command->callback([&selected, options] {
    if (options->prompt.empty() && options->prompt_file.empty())
      throw CLI::ValidationError("--prompt", "give --prompt TEXT or --prompt-file FILE");
    selected = [options] { return bench_speculative(*options); };
  });
}

}  // namespace chatflow::cli
