// chatflow's command line: parses arguments with CLI11 and hands off to one command each.
#include <CLI/CLI.hpp>

#include "framework/cli/commands.h"

namespace {

void add_sampling_options(CLI::App* command, chatflow::cli::SamplingOptions& sampling) {
  command->add_option("--max-tokens", sampling.max_tokens, "tokens to generate at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command->add_option("--temperature", sampling.temperature, "0 for greedy")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  command->add_option("--top-k", sampling.top_k, "0 disables")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  command->add_option("--top-p", sampling.top_p, "1 disables")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command->add_option("--min-p", sampling.min_p, "0 disables")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command->add_option("--repeat-penalty", sampling.repetition_penalty, "1 disables")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  command->add_option("--presence-penalty", sampling.presence_penalty)
      ->check(CLI::Range(-2.0, 2.0))
      ->capture_default_str();
  command->add_option("--frequency-penalty", sampling.frequency_penalty)
      ->check(CLI::Range(-2.0, 2.0))
      ->capture_default_str();
  command->add_option("--seed", sampling.seed, "-1: random")->capture_default_str();
  command->add_option("--stop", sampling.stop, "stop string (repeatable)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace chatflow::cli;
  CLI::App app{"chatflow: chat pipelines declared in YAML, run on a oneTBB flow graph"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("chatflow ") + CHATFLOW_VERSION);

  ValidateOptions validate;
  auto* validate_app =
      app.add_subcommand("validate", "Load, check and build pipeline files without serving");
  validate_app->add_option("files", validate.files, "pipeline YAML files")->required();

  GraphOptions graph;
  auto* graph_app =
      app.add_subcommand("graph", "Draw a checked pipeline as Graphviz DOT or Mermaid");
  graph_app->add_option("file", graph.file, "pipeline YAML file")->required();
  graph_app->add_option("--format", graph.format, "dot or mermaid")
      ->check(CLI::IsMember({"dot", "mermaid"}))
      ->capture_default_str();

  StagesOptions stages;
  auto* stages_app = app.add_subcommand("stages", "List stage and resource types, or describe one");
  stages_app->add_option("type", stages.type, "a stage or resource type to describe");
  stages_app->add_option("--plugin", stages.plugin,
                         "inspect a plugin library: its descriptor, or why it is refused");

  RunOptions run;
  auto* run_app =
      app.add_subcommand("run", "Push one request through a pipeline and print the stream");
  run_app->add_option("file", run.file, "pipeline YAML file")->required();
  run_app->add_option("--prompt", run.prompt, "the user message")->required();
  run_app->add_option("--system", run.system, "an optional system message");
  run_app->add_flag("--completion", run.completion, "a raw completion prompt (no chat template)");
  run_app->add_option("--api-key", run.api_key, "for a pipeline with auth")
      ->envname("CHATFLOW_API_KEY");
  add_sampling_options(run_app, run.sampling);

  ServeOptions serve;
  auto* serve_app = app.add_subcommand(
      "serve", "Serve a pipeline over the OpenAI HTTP API (chat, completions, SSE, metrics)");
  serve_app->add_option("--config", serve.config, "serve file: server settings and the pipeline")
      ->capture_default_str();
  serve_app->add_option("--pipeline", serve.pipeline,
                        "serve this pipeline YAML with default server settings instead");
  serve_app->add_option("--host", serve.host, "address to listen on (overrides the file)");
  serve_app->add_option("--port", serve.port, "TCP port; 0 picks a free one (overrides the file)")
      ->check(CLI::Range(0, 65535));
  serve_app->add_option("--access-log", serve.access_log,
                        "JSON access log: stderr, stdout, off, or a file path");

  KeysOptions keys;
  auto* keys_app = app.add_subcommand("keys", "Manage API keys (only their hashes are stored)");
  keys_app->require_subcommand(1);
  auto* keys_add = keys_app->add_subcommand("add", "Create a key; prints it once");
  keys_add->add_option("--tenant", keys.tenant, "the tenant the key belongs to")->required();
  keys_add->add_option("--user", keys.user, "the user, for logs and per-user limits");
  keys_add->add_option("--role", keys.roles, "a role (repeatable), e.g. admin");
  keys_add->add_option("--rpm", keys.rpm, "requests per minute for this key")
      ->check(CLI::Range(0.0, 1e9));
  keys_add->add_option("--tpm", keys.tpm, "tokens per minute for this key")
      ->check(CLI::Range(0.0, 1e12));
  auto* keys_list = keys_app->add_subcommand("list", "List keys (ids, tenants, roles, state)");
  auto* keys_revoke = keys_app->add_subcommand("revoke", "Revoke a key by its id");
  keys_revoke->add_option("id", keys.id, "the key's id (see `keys list`)")->required();
  for (auto* command : {keys_add, keys_list, keys_revoke}) {
    command->add_option("--keys-file", keys.keys_file, "the keys file")->capture_default_str();
  }

  UsageOptions usage;
  auto* usage_app = app.add_subcommand("usage", "Tokens used per tenant, from a quota ledger");
  usage_app->add_option("--tenant", usage.tenant, "one tenant (default: all)");
  usage_app->add_option("--database", usage.database, "the quota stage's SQLite file")
      ->capture_default_str();
  usage_app->add_option("--period", usage.period, "day, month or total")
      ->check(CLI::IsMember({"day", "month", "total"}))
      ->capture_default_str();

  SimilarityOptions similarity;
  auto* similarity_app = app.add_subcommand(
      "similarity", "Cosine similarity of two texts, as the semantic cache sees them");
  similarity_app->add_option("first", similarity.first)->required();
  similarity_app->add_option("second", similarity.second)->required();
  similarity_app->add_option("--model", similarity.model,
                             "a model2vec directory (default: n-grams)");

  // The embedder an index is built with; retrieval pipelines must configure the same one.
  auto embedder_options = [](CLI::App* command, std::string& kind, std::string& path,
                             size_t& dimensions, int& ngram) {
    command->add_option("--embedder", kind, "ngrams or model2vec")
        ->check(CLI::IsMember({"ngrams", "model2vec"}))
        ->capture_default_str();
    command->add_option("--embedder-path", path, "model2vec: the model's directory");
    command->add_option("--dimensions", dimensions, "ngrams: vector length")
        ->check(CLI::Range(16, 4096))
        ->capture_default_str();
    command->add_option("--ngram", ngram, "ngrams: characters per n-gram")
        ->check(CLI::Range(2, 8))
        ->capture_default_str();
  };

  IndexOptions index;
  auto* index_app = app.add_subcommand(
      "index", "Chunk documents (.txt/.md folders, JSONL, SMART) into a retrieval index");
  index_app->add_option("inputs", index.inputs, "folders, .jsonl or SMART files")->required();
  index_app->add_option("--out,-o", index.out, "the index directory (created or updated)")
      ->required();
  index_app->add_option("--chunk-tokens", index.chunk_tokens, "tokens per chunk")
      ->check(CLI::Range(8, 100000))
      ->capture_default_str();
  index_app->add_option("--overlap", index.overlap, "tokens neighbouring chunks share")
      ->capture_default_str();
  index_app->add_flag("--prune", index.prune,
                      "remove indexed documents that are not in the inputs any more");
  embedder_options(index_app, index.embedder, index.embedder_path, index.dimensions, index.ngram);

  EvalRetrievalOptions eval_retrieval;
  auto* eval_retrieval_app = app.add_subcommand(
      "eval-retrieval",
      "Measure retrieval quality on a judged collection (SMART or BEIR): BM25, dense, hybrid, "
      "hybrid+rerank");
  eval_retrieval_app->add_option("--collection", eval_retrieval.collection, "the directory")
      ->required();
  eval_retrieval_app
      ->add_option("--metric", eval_retrieval.metrics,
                   "ndcg@K, recall@K, mrr[@K], map[@K], comma-separated")
      ->capture_default_str();
  eval_retrieval_app->add_option("--index", eval_retrieval.index,
                                 "keep the index in this directory (default: a temporary one)");
  eval_retrieval_app->add_option("--depth", eval_retrieval.depth, "candidates per query")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  eval_retrieval_app->add_option("--chunk-tokens", eval_retrieval.chunk_tokens)
      ->check(CLI::Range(8, 100000))
      ->capture_default_str();
  eval_retrieval_app->add_option("--overlap", eval_retrieval.overlap)->capture_default_str();
  eval_retrieval_app->add_option("--rrf-k", eval_retrieval.rrf_k)->capture_default_str();
  eval_retrieval_app->add_option("--fusion", eval_retrieval.fusion, "rrf or weighted")
      ->check(CLI::IsMember({"rrf", "weighted"}))
      ->capture_default_str();
  eval_retrieval_app->add_option("--sparse-weight", eval_retrieval.sparse_weight)
      ->capture_default_str();
  eval_retrieval_app->add_option("--dense-weight", eval_retrieval.dense_weight)
      ->capture_default_str();
  eval_retrieval_app
      ->add_option("--rerank-weights", eval_retrieval.rerank_weights,
                   "coverage,proximity,sparse,dense (default: the rerank stage's)")
      ->delimiter(',')
      ->expected(4);
  embedder_options(eval_retrieval_app, eval_retrieval.embedder, eval_retrieval.embedder_path,
                   eval_retrieval.dimensions, eval_retrieval.ngram);

  BenchRetrievalOptions bench_retrieval;
  auto* bench_retrieval_app = app.add_subcommand(
      "bench-retrieval",
      "Index generated documents and measure indexing speed, index size and hybrid retrieval "
      "latency");
  bench_retrieval_app->add_option("--chunks", bench_retrieval.chunks, "documents (one chunk each)")
      ->check(CLI::Range(size_t{100}, size_t{100000000}))
      ->capture_default_str();
  bench_retrieval_app->add_option("--words", bench_retrieval.words, "words per chunk")
      ->check(CLI::Range(size_t{1}, size_t{100000}))
      ->capture_default_str();
  bench_retrieval_app->add_option("--queries", bench_retrieval.queries, "timed queries")
      ->check(CLI::Range(size_t{1}, size_t{10000000}))
      ->capture_default_str();
  bench_retrieval_app->add_option("--index", bench_retrieval.index,
                                  "keep the index in this directory");

  BenchServeOptions bench_serve;
  auto* bench_serve_app = app.add_subcommand(
      "bench", "Load-test an OpenAI-compatible server: TTFT, TPOT, ITL, throughput, goodput");
  bench_serve_app->add_option("--url", bench_serve.url, "the server's base URL")
      ->capture_default_str();
  bench_serve_app->add_option("--endpoint", bench_serve.endpoint, "chat or completions")
      ->check(CLI::IsMember({"chat", "completions"}))
      ->capture_default_str();
  bench_serve_app->add_option("--model", bench_serve.model,
                              "model id (default: the first one the server lists)");
  bench_serve_app
      ->add_option("--concurrency", bench_serve.concurrency,
                   "requests in flight (with --rate: at most)")
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  bench_serve_app
      ->add_option("--rate", bench_serve.rate, "Poisson arrivals per second; 0: closed loop")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  bench_serve_app->add_option("--requests", bench_serve.requests, "requests to send")
      ->check(CLI::Range(1, 100'000'000))
      ->capture_default_str();
  bench_serve_app
      ->add_option("--duration", bench_serve.duration_s,
                   "send for this many seconds instead of --requests")
      ->check(CLI::Range(0.0, 1e6));
  bench_serve_app->add_option("--max-tokens", bench_serve.max_tokens)
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  bench_serve_app->add_option("--temperature", bench_serve.temperature)
      ->check(CLI::Range(0.0, 2.0))
      ->capture_default_str();
  bench_serve_app->add_flag("--ignore-eos,!--no-ignore-eos", bench_serve.ignore_eos,
                            "generate exactly --max-tokens (default on)");
  bench_serve_app->add_option("--seed", bench_serve.seed)->capture_default_str();
  bench_serve_app
      ->add_option("--distinct", bench_serve.distinct,
                   "N > 0: only N different requests, request i repeating request i mod N, each "
                   "with its own words (to fill and then hit a cache)")
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  bench_serve_app
      ->add_option("--sessions", bench_serve.sessions,
                   "N > 0: request i carries session_id bench-(i mod N), as N callers would (an "
                   "A/B split by session then reports each arm)")
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  bench_serve_app->add_option("--slo-ttft-ms", bench_serve.slo_ttft_ms, "goodput: TTFT at most")
      ->capture_default_str();
  bench_serve_app->add_option("--slo-tpot-ms", bench_serve.slo_tpot_ms, "goodput: TPOT at most")
      ->capture_default_str();
  bench_serve_app->add_option("--api-key", bench_serve.api_key, "sent as a Bearer token");
  bench_serve_app->add_flag("--json", bench_serve.json, "print JSON instead of a table");
  bench_serve_app->add_flag("--verbose", bench_serve.verbose, "print every failure");

  BenchGraphOptions bench_graph;
  auto* bench_graph_app = app.add_subcommand(
      "bench-graph", "Measure the runtime's own overhead through a chain of no-op stages");
  bench_graph_app->add_option("--stages", bench_graph.stages, "stages in the chain")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  bench_graph_app->add_option("--requests", bench_graph.requests, "requests per measurement")
      ->check(CLI::Range(1, 100'000'000))
      ->capture_default_str();
  bench_graph_app->add_option("--in-flight", bench_graph.in_flight, "requests kept in flight")
      ->delimiter(',')
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  bench_graph_app->add_flag("--json", bench_graph.json, "print JSON instead of a table");

  InspectOptions inspect;
  auto* inspect_app = app.add_subcommand("inspect", "Show a GGUF file's metadata and tensors");
  inspect_app->add_option("model", inspect.model, "GGUF file")->required();
  inspect_app->add_flag("--all-tensors", inspect.all_tensors, "list every tensor");

  TokenizeOptions tokenize;
  auto* tokenize_app =
      app.add_subcommand("tokenize", "Print the token ids of a file's exact bytes");
  tokenize_app->add_option("--model", tokenize.model, "GGUF file (a vocabulary-only one will do)")
      ->required();
  tokenize_app->add_option("--file", tokenize.file, "input file; '-' or absent: standard input");
  tokenize_app->add_flag("--bos", tokenize.bos,
                         "add BOS (and the vocabulary's other special tokens)");
  tokenize_app->add_flag("--special", tokenize.special,
                         "recognise control tokens written in the text");

  DetokenizeOptions detokenize;
  auto* detokenize_app =
      app.add_subcommand("detokenize", "Print the text of space-separated token ids");
  detokenize_app->add_option("--model", detokenize.model, "GGUF file")->required();
  detokenize_app->add_option("--file", detokenize.file,
                             "input file; '-' or absent: standard input");
  detokenize_app->add_flag("--special", detokenize.special, "print control tokens as text");

  GenerateOptions generate;
  auto* generate_app =
      app.add_subcommand("generate", "Complete a prompt with a model (no template, no pipeline)");
  generate_app->add_option("--model", generate.model, "GGUF file")->required();
  generate_app->add_option("--prompt", generate.prompt, "text to continue")->required();
  generate_app->add_option("--threads", generate.threads, "compute threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  generate_app->add_flag("--echo", generate.echo, "print the prompt before the completion");
  generate_app->add_flag("--verbose", generate.verbose, "print timings to standard error");
  add_sampling_options(generate_app, generate.sampling);

  MakeModelOptions make_model;
  auto* make_model_app =
      app.add_subcommand("make-model", "Write a random-weight GGUF model of any shape and type");
  make_model_app->add_option("--arch", make_model.architecture, "llama or qwen2")
      ->check(CLI::IsMember({"llama", "qwen2"}))
      ->capture_default_str();
  make_model_app->add_option("--dim", make_model.dim, "embedding length")
      ->check(CLI::Range(2, 65536))
      ->capture_default_str();
  make_model_app->add_option("--layers", make_model.layers)
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  make_model_app->add_option("--heads", make_model.heads)
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  make_model_app
      ->add_option("--kv-heads", make_model.kv_heads, "key/value heads (default: --heads)")
      ->check(CLI::Range(0, 1024));
  make_model_app->add_option("--ffn", make_model.ffn, "feed-forward length")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  make_model_app->add_option("--context", make_model.context)
      ->check(CLI::Range(16, 1 << 22))
      ->capture_default_str();
  make_model_app->add_option("--type", make_model.type, "f32, f16, bf16, q8_0 or q4_0")
      ->capture_default_str();
  make_model_app->add_option("--seed", make_model.seed)->capture_default_str();
  make_model_app->add_flag("--tie-embeddings", make_model.tie_embeddings,
                           "no separate output matrix");
  make_model_app->add_option("--vocab-from", make_model.vocabulary_from,
                             "copy the tokenizer from this GGUF file");
  make_model_app->add_option("--output,-o", make_model.output, "file to write")->required();

  BenchEngineOptions bench_engine;
  auto* bench_engine_app = app.add_subcommand(
      "bench-engine", "Prompt and generation speed of a model (llama-bench style)");
  bench_engine_app->add_option("model", bench_engine.model, "GGUF file")->required();
  bench_engine_app->add_option("--threads", bench_engine.threads, "thread counts to measure")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  bench_engine_app
      ->add_option("--repetitions", bench_engine.repetitions, "runs per figure (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench_engine_app->add_flag("--json", bench_engine.json, "print JSON instead of a table");
  bench_engine_app->add_flag("--bandwidth", bench_engine.bandwidth,
                             "also measure memory read bandwidth");
  bench_engine_app
      ->add_option(
          "--concurrency", bench_engine.concurrency,
          "sequences decoded together (e.g. 1,8,32): batching throughput and prefix-cache reuse")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  if (validate_app->parsed()) return validate_command(validate);
  if (graph_app->parsed()) return graph_command(graph);
  if (stages_app->parsed()) return stages_command(stages);
  if (run_app->parsed()) return run_command(run);
  if (serve_app->parsed()) return serve_command(serve);
  if (bench_serve_app->parsed()) return bench_serve_command(bench_serve);
  if (usage_app->parsed()) return usage_command(usage);
  if (similarity_app->parsed()) return similarity_command(similarity);
  if (index_app->parsed()) return index_command(index);
  if (bench_retrieval_app->parsed()) return bench_retrieval_command(bench_retrieval);
  if (eval_retrieval_app->parsed()) return eval_retrieval_command(eval_retrieval);
  if (keys_app->parsed()) {
    keys.action = keys_add->parsed() ? "add" : keys_list->parsed() ? "list" : "revoke";
    return keys_command(keys);
  }
  if (bench_graph_app->parsed()) return bench_graph_command(bench_graph);
  if (inspect_app->parsed()) return inspect_command(inspect);
  if (tokenize_app->parsed()) return tokenize_command(tokenize);
  if (detokenize_app->parsed()) return detokenize_command(detokenize);
  if (generate_app->parsed()) return generate_command(generate);
  if (make_model_app->parsed()) return make_model_command(make_model);
  if (bench_engine_app->parsed()) return bench_engine_command(bench_engine);
  return 2;
}
