// How a subcommand joins `chatflow`: its file declares the subcommand's options on the app and,
// when the subcommand is the one parsed, leaves in `selected` the body to run (its options held
// by that body). main.cpp calls one add_..._command per command, parses, and runs `selected`,
// reporting any std::exception that escapes as `chatflow: <what>`, exit code 1. A new command is
// its file (listed in framework/CMakeLists.txt), a line here and a line in main.cpp.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace chatflow {
struct GenerationParams;
}

namespace chatflow::cli {

// The parsed command's work; returns the process exit code (0 success, 1 failure, 2 usage).
using CommandBody = std::function<int()>;

void add_validate_command(CLI::App& app, CommandBody& selected);
void add_graph_command(CLI::App& app, CommandBody& selected);
void add_stages_command(CLI::App& app, CommandBody& selected);
void add_run_command(CLI::App& app, CommandBody& selected);
void add_serve_command(CLI::App& app, CommandBody& selected);
void add_keys_command(CLI::App& app, CommandBody& selected);
void add_usage_command(CLI::App& app, CommandBody& selected);
void add_similarity_command(CLI::App& app, CommandBody& selected);
void add_index_command(CLI::App& app, CommandBody& selected);
void add_eval_retrieval_command(CLI::App& app, CommandBody& selected);
void add_bench_retrieval_command(CLI::App& app, CommandBody& selected);  // bench/retrieval.cpp
void add_bench_command(CLI::App& app, CommandBody& selected);            // bench/serving_load.cpp
void add_bench_graph_command(CLI::App& app, CommandBody& selected);      // bench/graph_overhead.cpp
void add_bench_kernels_command(CLI::App& app, CommandBody& selected);    // bench/kernel_speed.cpp
void add_bench_ledger_command(CLI::App& app, CommandBody& selected);     // bench/ledger_cost.cpp
void add_inspect_command(CLI::App& app, CommandBody& selected);
void add_tokenize_command(CLI::App& app, CommandBody& selected);    // tokenize_command.cpp
void add_detokenize_command(CLI::App& app, CommandBody& selected);  // tokenize_command.cpp
void add_chat_template_command(CLI::App& app, CommandBody& selected);
void add_generate_command(CLI::App& app, CommandBody& selected);
void add_make_model_command(CLI::App& app, CommandBody& selected);
void add_quantize_command(CLI::App& app, CommandBody& selected);
void add_perplexity_command(CLI::App& app, CommandBody& selected);
void add_bench_engine_command(CLI::App& app, CommandBody& selected);  // bench/engine_throughput.cpp
void add_bench_chat_template_command(CLI::App& app,
                                     CommandBody& selected);  // bench/chat_template_render.cpp
void add_bench_grammar_command(CLI::App& app, CommandBody& selected);  // bench/grammar_masks.cpp
void add_bench_speculative_command(CLI::App& app,
                                   CommandBody& selected);  // bench/speculative_decoding.cpp

// The generation controls `run` and `generate` share (--max-tokens ... --stop), bound straight
// into `generation` after setting the command line's own defaults on it (128 tokens, temperature
// 0.8, top-k 40, top-p 0.95, min-p 0.05). --seed -1, the default, leaves it unseeded.
void add_sampling_options(CLI::App& command, GenerationParams& generation);

// The embedder an index is built with; retrieval pipelines must configure the same one.
struct EmbedderOptions {
  std::string kind = "ngrams";  // ngrams or model2vec
  std::string path;             // model2vec: the model's directory
  size_t dimensions = 256;      // ngrams: vector length
  int ngram = 3;                // ngrams: characters per n-gram
};
void add_embedder_options(CLI::App& command, EmbedderOptions& embedder);

}  // namespace chatflow::cli
