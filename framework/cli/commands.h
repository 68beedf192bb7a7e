// The chatflow subcommands. main.cpp parses the command line (CLI11 stays in that one file);
// each command lives in its own file and returns the process exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chatflow::cli {

struct ValidateOptions {
  std::vector<std::string> files;
};
int validate_command(const ValidateOptions& options);

struct GraphOptions {
  std::string file;
  std::string format = "dot";
};
int graph_command(const GraphOptions& options);

struct StagesOptions {
  std::string type;    // empty: list every type
  std::string plugin;  // inspect this plugin library instead
};
int stages_command(const StagesOptions& options);

// Generation controls shared by `run` and `generate`.
struct SamplingOptions {
  int max_tokens = 128;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  long long seed = -1;  // -1: random
  std::vector<std::string> stop;
};

struct RunOptions {
  std::string file;
  std::string prompt;
  std::string system;
  bool completion = false;  // send the prompt as a completion, without the chat template
  std::string api_key;      // sent as the Authorization header, for pipelines with auth
  SamplingOptions sampling;
};
int run_command(const RunOptions& options);

struct ServeOptions {
  std::string config = "configs/default.yaml";
  std::string pipeline;  // set: serve this pipeline with default server settings
  std::optional<std::string> host;
  std::optional<int> port;
  std::optional<std::string> access_log;
};
int serve_command(const ServeOptions& options);

struct KeysOptions {
  std::string action;  // add, list, revoke
  std::string keys_file = "var/keys.yaml";
  std::string tenant;
  std::string user;
  std::vector<std::string> roles;
  double rpm = 0;
  double tpm = 0;
  std::string id;  // revoke
};
int keys_command(const KeysOptions& options);

struct UsageOptions {
  std::string database = "var/usage.db";
  std::string tenant;  // empty: every tenant
  std::string period = "month";
};
int usage_command(const UsageOptions& options);

struct SimilarityOptions {
  std::string first;
  std::string second;
  std::string model;  // a model2vec directory; empty: hashed n-grams
};
int similarity_command(const SimilarityOptions& options);

struct IndexOptions {
  std::vector<std::string> inputs;
  std::string out;
  bool prune = false;  // drop indexed documents the inputs no longer have
  size_t chunk_tokens = 200;
  size_t overlap = 40;
  std::string embedder = "ngrams";
  std::string embedder_path;
  size_t dimensions = 256;
  int ngram = 3;
};
int index_command(const IndexOptions& options);

struct EvalRetrievalOptions {
  std::string collection;
  std::string metrics = "ndcg@10,recall@100,mrr";
  std::string index;  // empty: a temporary directory
  size_t depth = 100;
  size_t chunk_tokens = 200;
  size_t overlap = 40;
  double rrf_k = 60;
  std::string fusion = "rrf";
  double sparse_weight = 0.5;
  double dense_weight = 0.5;
  std::vector<double> rerank_weights;  // coverage, proximity, sparse, dense
  std::string embedder = "ngrams";
  std::string embedder_path;
  size_t dimensions = 256;
  int ngram = 3;
};
int eval_retrieval_command(const EvalRetrievalOptions& options);

struct BenchRetrievalOptions {
  size_t chunks = 100000;
  size_t words = 120;
  size_t vocabulary = 30000;
  size_t queries = 2000;
  uint64_t seed = 1;
  std::string index;  // keep the index here (default: a temporary directory, removed)
};
int bench_retrieval_command(const BenchRetrievalOptions& options);

struct BenchServeOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string endpoint = "chat";  // chat or completions
  std::string model;              // empty: the first model the server lists
  int concurrency = 8;
  double rate = 0;  // requests per second (Poisson); 0: closed loop at `concurrency`
  int requests = 200;
  double duration_s = 0;  // > 0: send for this long instead of a number of requests
  int max_tokens = 64;
  double temperature = 1.0;
  bool ignore_eos = true;  // every completion is max_tokens long, so runs compare
  uint64_t seed = 1;
  int64_t distinct = 0;  // > 0: request i repeats request i mod distinct (cache benchmarks)
  int64_t sessions = 0;  // > 0: request i carries session_id bench-(i mod sessions) (A/B splits)
  double slo_ttft_ms = 1000;
  double slo_tpot_ms = 100;
  std::string api_key = "none";
  bool json = false;
  bool verbose = false;
};
int bench_serve_command(const BenchServeOptions& options);

struct BenchGraphOptions {
  int stages = 12;
  int requests = 200000;
  std::vector<int> in_flight = {1, 64};
  bool json = false;
};
int bench_graph_command(const BenchGraphOptions& options);

struct InspectOptions {
  std::string model;
  bool all_tensors = false;
};
int inspect_command(const InspectOptions& options);

struct TokenizeOptions {
  std::string model;
  std::string file;  // "-" or empty: standard input
  bool bos = false;
  bool special = false;
};
int tokenize_command(const TokenizeOptions& options);

struct DetokenizeOptions {
  std::string model;
  std::string file;
  bool special = false;
};
int detokenize_command(const DetokenizeOptions& options);

struct GenerateOptions {
  std::string model;
  std::string prompt;
  int threads = 1;
  bool echo = false;
  bool verbose = false;
  SamplingOptions sampling;
};
int generate_command(const GenerateOptions& options);

struct MakeModelOptions {
  std::string architecture = "llama";
  int64_t dim = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 0;  // 0: same as heads
  int64_t ffn = 128;
  int64_t context = 512;
  std::string type = "f32";
  uint64_t seed = 1;
  bool tie_embeddings = false;
  std::string vocabulary_from;
  std::string output;
};
int make_model_command(const MakeModelOptions& options);

struct BenchEngineOptions {
  std::string model;
  std::vector<int> threads = {1, 2};
  std::vector<int> concurrency;  // when set: continuous-batching throughput instead of pp/tg
  int repetitions = 5;
  bool json = false;
  bool bandwidth = false;
};
int bench_engine_command(const BenchEngineOptions& options);

}  // namespace chatflow::cli
