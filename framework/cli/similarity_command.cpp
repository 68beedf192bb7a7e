// chatflow similarity A B: how alike two texts are to an embedder (cosine), and whether the
// semantic cache's verifier takes them for the same question; for choosing a threshold.
// chatflow similarity --dataset FILE: plays the conversations of FILE (the format of
// framework/cache/followup_dataset.h) through a real semantic_cache stage in front of a stand-in
// model, and prints how many true repeats it answered and how many other questions it answered
// wrongly.
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include <CLI/CLI.hpp>

#include "framework/api/registry.h"
#include "framework/api/sink.h"
#include "framework/cache/followup_dataset.h"
#include "framework/cache/question_verifier.h"
#include "framework/cli/command.h"
#include "framework/embedding/embedder.h"
#include "framework/loading/pipeline_spec.h"
#include "framework/runtime/pipeline.h"

namespace chatflow::cli {
namespace {

struct SimilarityOptions {
  std::string first;
  std::string second;
  std::string model;  // a model2vec directory; empty: hashed n-grams
  std::string dataset;
  double threshold = 0.95;
  int answer_words = 100;
  bool verbose = false;
};

int compare_two(const SimilarityOptions& options) {
  auto embedder = options.model.empty() ? embedding::make_ngram_embedder(256, 3)
                                        : embedding::load_model2vec(options.model);
  float similarity =
      embedding::dot(embedder->embed(options.first), embedder->embed(options.second));
  std::string difference = cache::question_difference(options.first, options.second);
  std::string verdict =
      difference.empty() ? "same question" : "different questions (" + difference + ")";
  std::printf("%.4f cosine (%s); verifier: %s\n", similarity, embedder->describe().c_str(),
              verdict.c_str());
  return 0;
}

// The stand-in model: "[answer N] " and the question, then `words` words of a story, as long
// answers fill a real conversation. Its answers never repeat, so a cached one tells whose it was.
struct StandInConfig {
  int words = 0;
};

class StandInModel final : public RequestStage {
 public:
  explicit StandInModel(StandInConfig config) : config_(config) {}

  Route process(Request& request, StageIo& io) override {
    static const char* kStory[] = {
        "the",  "old",     "dragon",  "flew",  "over",     "the",     "frozen", "valley", "looking",
        "for",  "the",     "village", "where", "the",      "young",   "knight", "had",    "hidden",
        "a",    "map",     "of",      "the",   "mountain", "caves",   "and",    "the",    "river",
        "that", "ran",     "under",   "them",  "toward",   "the",     "sea",    "while",  "the",
        "wind", "carried", "songs",   "of",    "the",      "harvest", "across", "the",    "fields"};
    constexpr size_t kStoryWords = sizeof kStory / sizeof kStory[0];
    size_t number = ++answers_;
    std::string text = "[answer " + std::to_string(number) + "] " + request.last_user_message();
    for (int word = 0; word < config_.words; ++word)
      text += std::string(" ") + kStory[(number * 7 + static_cast<size_t>(word)) % kStoryWords];
    ChunkWriter writer = io.open_stream(0);
    writer.write(Chunk::delta(text));
    writer.finish(FinishReason::stop);
    return Route::streaming();
  }

 private:
  StandInConfig config_;
  std::atomic<size_t> answers_{0};
};

StageTypeInfo stand_in_type() {
  StageTypeBuilder<StandInConfig> type("stand_in_model", StageKind::request,
                                       "numbered answers, for measuring a cache");
  type.port("out", PortKind::stream, "the answer");
  type.config().key("words", &StandInConfig::words, "story words after the question");
  type.create([](const StandInConfig& config, StageContext&) {
    return std::make_unique<StandInModel>(config);
  });
  return type.build();
}

class AnswerSink final : public Sink {
 public:
  void on_chunk(Request&, const Chunk& chunk) override {
    std::lock_guard lock(mutex_);
    text_ += chunk.text;
  }
  void on_finish(Request&) override {
    std::lock_guard lock(mutex_);
    finished_ = true;
    changed_.notify_all();
  }
  std::string wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return finished_; });
    return text_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool finished_ = false;
  std::string text_;
};

int measure_dataset(const SimilarityOptions& options) {
  std::vector<cache::DatasetConversation> conversations =
      cache::read_followup_dataset(options.dataset);
  Registry registry = builtin_registry();
  registry.add(stand_in_type());
  std::string embedder = options.model.empty()
                             ? "{type: embedder, kind: ngrams}"
                             : "{type: embedder, kind: model2vec, path: \"" + options.model + "\"}";
  std::string yaml = "version: 1\nname: similarity-dataset\nresources:\n  vectors: " + embedder +
                     "\nstages:\n  - {name: semantic, type: semantic_cache, config: {embedder: "
                     "vectors, threshold: " +
                     std::to_string(options.threshold) +
                     "}}\n  - {name: model, type: stand_in_model, config: {words: " +
                     std::to_string(options.answer_words) +
                     "}}\n  - {name: emit, type: sse_emit}\nedges:\n  - semantic.hit -> emit\n";
  Diagnostics diagnostics;
  std::unique_ptr<Pipeline> pipeline;
  if (auto spec = parse_pipeline_yaml(yaml, "similarity-dataset", registry, diagnostics))
    pipeline = Pipeline::build(std::move(*spec), diagnostics);
  if (!pipeline) {
    std::fprintf(stderr, "%s", diagnostics.to_string().c_str());
    return 1;
  }
  size_t asked = 0;
  cache::FollowupScore score =
      cache::score_followups(conversations, [&](const std::vector<Message>& messages) {
        auto request = std::make_shared<Request>();
        request->id = "similarity-" + std::to_string(++asked);
        request->identity.tenant = "dataset";
        request->model = "stand-in";
        request->messages = messages;
        request->generation.temperature = 0.7f;  // sampled: only the semantic cache answers
        request->generation.max_tokens = 256;
        auto sink = std::make_shared<AnswerSink>();
        request->sink = sink;
        if (pipeline->submit(request) != Admission::accepted)
          throw std::runtime_error("the pipeline did not admit a request");
        cache::ServedAnswer served{sink->wait(), false};
        if (request->error())
          throw std::runtime_error("a request failed: " + request->error()->message);
        for (const auto& [field, value] : request->response_headers())
          served.from_cache |= field == "x-chatflow-cache" && value == "semantic";
        return served;
      });
  auto percent = [](size_t part, size_t whole) {
    return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  };
  std::printf(
      "%s: %zu conversations, %zu questions asked (threshold %.2f, %s, answers of %d "
      "story words)\n",
      options.dataset.c_str(), score.conversations, score.asked, options.threshold,
      options.model.empty() ? "n-grams" : options.model.c_str(), options.answer_words);
  std::printf("true repeats answered from the cache: %zu of %zu (%.1f%%)\n", score.repeats_served,
              score.repeats, percent(score.repeats_served, score.repeats));
  std::printf("different questions answered from the cache (false hits): %zu of %zu (%.1f%%)\n",
              score.different_served, score.different,
              percent(score.different_served, score.different));
  std::printf("wrong answers served, any question: %zu\n", score.wrong_answers);
  if (options.verbose) {
    for (const auto& line : score.wrong)
      std::printf("wrong: %s\n", line.c_str());
    for (const auto& line : score.missed_repeats)
      std::printf("missed repeat: %s\n", line.c_str());
  }
  return score.wrong_answers == 0 ? 0 : 1;
}

int similarity_command(const SimilarityOptions& options) {
  bool pair = !options.first.empty() || !options.second.empty();
  if (options.dataset.empty() == !pair || (pair && options.second.empty())) {
    std::fprintf(stderr, "chatflow similarity: give two texts, or --dataset FILE (not both)\n");
    return 2;
  }
  return pair ? compare_two(options) : measure_dataset(options);
}

}  // namespace

void add_similarity_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<SimilarityOptions>();
  auto* command = app.add_subcommand(
      "similarity",
      "Cosine similarity of two texts and the verifier's verdict, as the semantic cache sees "
      "them; or the cache's hits and false hits over a dataset of conversations");
  command->add_option("first", options->first, "a text");
  command->add_option("second", options->second, "another text");
  command->add_option("--model", options->model, "a model2vec directory (default: n-grams)");
  command->add_option("--dataset", options->dataset,
                      "conversations to play through a semantic_cache stage (JSON Lines, see "
                      "tests/data/semantic_cache_followups.jsonl)");
  command->add_option("--threshold", options->threshold, "--dataset: the cache's threshold")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 1.0));
  command
      ->add_option("--answer-words", options->answer_words,
                   "--dataset: words of story in each stand-in answer (long answers fill "
                   "the conversation as a model's do)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  command->add_flag("--verbose", options->verbose,
                    "--dataset: list each wrong answer and each missed repeat");
  command->callback(
      [&selected, options] { selected = [options] { return similarity_command(*options); }; });
}

}  // namespace chatflow::cli
