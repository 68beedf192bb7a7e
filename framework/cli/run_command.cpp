// chatflow run FILE --prompt TEXT: one request through a pipeline, its stream printed as it comes.
#include <chrono>
#include <future>
#include <iostream>

#include "framework/cli/commands.h"
#include "framework/runtime/pipeline.h"
#include "framework/api/sink.h"

namespace chatflow::cli {
namespace {

class PrintingSink final : public Sink {
 public:
  void on_chunk(Request&, const Chunk& chunk) override {
    std::cout << chunk.text << std::flush;
    printed_any_ = printed_any_ || !chunk.text.empty();
  }
  void on_finish(Request&) override { done_.set_value(); }

  std::future<void> done() { return done_.get_future(); }
  bool printed_any() const { return printed_any_; }

 private:
  std::promise<void> done_;
  bool printed_any_ = false;
};

}  // namespace

int run_command(const RunOptions& options) {
  Diagnostics diagnostics;
  auto pipeline = load_pipeline(options.file, builtin_registry(), diagnostics);
  if (!pipeline) {
    std::cerr << diagnostics.to_string();
    return 1;
  }
  auto request = std::make_shared<Request>();
  request->id = "cli-1";
  request->created = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  if (options.completion) {
    request->kind = RequestKind::completion;
    request->prompt = options.prompt;
  } else {
    if (!options.system.empty()) request->messages.push_back({"system", options.system});
    request->messages.push_back({"user", options.prompt});
  }
  const SamplingOptions& sampling = options.sampling;
  GenerationParams& generation = request->generation;
  generation.max_tokens = sampling.max_tokens;
  generation.temperature = sampling.temperature;
  generation.top_k = sampling.top_k;
  generation.top_p = sampling.top_p;
  generation.min_p = sampling.min_p;
  generation.repetition_penalty = sampling.repetition_penalty;
  generation.presence_penalty = sampling.presence_penalty;
  generation.frequency_penalty = sampling.frequency_penalty;
  if (sampling.seed >= 0) generation.seed = static_cast<uint64_t>(sampling.seed);
  generation.stop = sampling.stop;
  if (!options.api_key.empty())
    request->headers.push_back({"authorization", "Bearer " + options.api_key});
  auto sink = std::make_shared<PrintingSink>();
  request->sink = sink;
  std::future<void> done = sink->done();
  if (Admission admission = pipeline->submit(request); admission != Admission::accepted) {
    std::cerr << "chatflow: the pipeline did not admit the request (" << to_string(admission)
              << ")\n";
    return 1;
  }
  done.wait();
  if (sink->printed_any()) std::cout << "\n";
  if (const auto& error = request->error()) {
    std::cerr << "chatflow: request failed: " << error->status << " " << error->type << ": "
              << error->message << "\n";
    return 1;
  }
  return 0;
}

}  // namespace chatflow::cli
