// chatflow eval-retrieval --collection DIR: indexes a judged collection (SMART or BEIR layout)
// and prints nDCG, recall and MRR with per-query latency for BM25, dense, hybrid and
// hybrid + rerank, side by side in one run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/retrieval/evaluation.h"
#include "framework/retrieval/hybrid.h"

namespace chatflow::cli {
namespace {

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
  EmbedderOptions embedder;
};

struct Metric {
  std::string name;  // as the user wrote it
  enum Kind { ndcg, recall, mrr, map } kind;
  size_t k;
};

std::vector<Metric> parse_metrics(const std::string& text, size_t depth) {
  std::vector<Metric> metrics;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item.empty()) continue;
    size_t at = item.find('@');
    std::string base = item.substr(0, at);
    size_t k = depth;
    if (at != std::string::npos) {
      try {
        k = std::stoul(item.substr(at + 1));
      } catch (const std::exception&) {
        k = 0;
      }
      if (k == 0) throw std::runtime_error("--metric '" + item + "': expected a positive cutoff");
    }
    if (base == "ndcg") {
      metrics.push_back({item, Metric::ndcg, k});
    } else if (base == "recall") {
      metrics.push_back({item, Metric::recall, k});
    } else if (base == "mrr") {
      metrics.push_back({item, Metric::mrr, k});
    } else if (base == "map") {
      metrics.push_back({item, Metric::map, k});
    } else {
      throw std::runtime_error("--metric '" + item +
                               "': expected ndcg@K, recall@K, mrr[@K] or map[@K]");
    }
  }
  if (metrics.empty()) throw std::runtime_error("--metric: name at least one metric");
  return metrics;
}

struct Method {
  std::string name;
  retrieval::HybridOptions options;
  bool rerank = false;
};

// The four ways of retrieving compared: each side alone, both fused, and fused then reranked.
std::vector<Method> methods_to_compare(const EvalRetrievalOptions& options, size_t depth) {
  retrieval::HybridOptions base;
  base.top_k = depth;
  base.rrf_k = options.rrf_k;
  base.fusion = options.fusion == "weighted" ? retrieval::Fusion::weighted
                                             : retrieval::Fusion::reciprocal_rank;
  base.sparse_weight = options.sparse_weight;
  base.dense_weight = options.dense_weight;
  base.concurrently =
      false;  // per-query latency of the work itself; the stage runs both sides at once
  std::vector<Method> methods;
  methods.push_back({"bm25", base, false});
  methods.back().options.sparse_k = depth;
  methods.back().options.dense_k = 0;
  methods.push_back({"dense", base, false});
  methods.back().options.sparse_k = 0;
  methods.back().options.dense_k = depth;
  methods.push_back({"hybrid", base, false});
  methods.back().options.sparse_k = depth;
  methods.back().options.dense_k = depth;
  methods.push_back({"hybrid+rerank", methods.back().options, true});
  return methods;
}

double score(const Metric& metric, const std::vector<std::string>& ranking,
             const retrieval::Judgments& judged) {
  switch (metric.kind) {
    case Metric::ndcg:
      return retrieval::ndcg_at(ranking, judged, metric.k);
    case Metric::recall:
      return retrieval::recall_at(ranking, judged, metric.k);
    case Metric::mrr:
      return retrieval::reciprocal_rank(ranking, judged, metric.k);
    case Metric::map:
      return retrieval::average_precision(ranking, judged, metric.k);
  }
  return 0;
}

// One row of the table: the method's mean of each metric over the judged queries, and its
// per-query latency.
void print_row(const Method& method, const std::vector<Metric>& metrics,
               const retrieval::Collection& collection, const retrieval::RetrievalIndex& index,
               const retrieval::Reranker& reranker, size_t depth) {
  retrieval::Reader everyone;
  everyone.everything = true;
  std::vector<double> sums(metrics.size(), 0.0);
  std::vector<double> latencies;
  for (const auto& query : collection.queries) {
    auto begin = std::chrono::steady_clock::now();
    auto candidates = retrieval::hybrid_search(index, query.text, method.options, everyone);
    if (method.rerank) retrieval::rerank(reranker, query.text, candidates, depth);
    latencies.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
            .count());
    std::vector<std::string> ranking;
    std::set<std::string> seen;
    for (const auto& candidate : candidates) {
      if (seen.insert(candidate.passage.document).second)
        ranking.push_back(candidate.passage.document);
    }
    const retrieval::Judgments& judged = collection.judgments.at(query.id);
    for (size_t m = 0; m < metrics.size(); ++m)
      sums[m] += score(metrics[m], ranking, judged);
  }
  std::printf("%-14s", method.name.c_str());
  double count = static_cast<double>(std::max<size_t>(collection.queries.size(), 1));
  for (double sum : sums)
    std::printf(" %10.4f", sum / count);
  std::printf(" %10.3f %10.3f\n", retrieval::percentile(latencies, 0.5),
              retrieval::percentile(latencies, 0.99));
}

// Its own catch: the message names the command ("chatflow eval-retrieval: ..."), as it always has.
int eval_retrieval_command(const EvalRetrievalOptions& options) {
  try {
    size_t depth = options.depth;
    std::vector<Metric> metrics = parse_metrics(options.metrics, depth);
    for (const auto& metric : metrics)
      depth = std::max(depth, metric.k);
    retrieval::Collection collection = retrieval::load_collection(options.collection);
    std::fprintf(stderr, "%s collection: %zu documents, %zu judged queries\n",
                 collection.layout.c_str(), collection.corpus.size(), collection.queries.size());

    std::shared_ptr<const embedding::Embedder> embedder =
        embedding::make_embedder(options.embedder.kind, options.embedder.path,
                                 options.embedder.dimensions, options.embedder.ngram);
    std::filesystem::path directory = options.index;
    bool temporary = directory.empty();
    if (temporary) {
      directory =
          std::filesystem::temp_directory_path() / ("chatflow-eval-" + std::to_string(::getpid()));
      std::filesystem::remove_all(directory);
    }
    auto index = std::make_shared<retrieval::RetrievalIndex>(directory.string(), embedder, true);
    auto started = std::chrono::steady_clock::now();
    retrieval::IndexingReport report =
        index->add(collection.corpus, {options.chunk_tokens, options.overlap});
    std::fprintf(stderr, "indexed %zu chunks in %.2f s\n", report.chunks_added,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    retrieval::LexicalWeights weights;
    if (options.rerank_weights.size() == 4) {
      weights = {options.rerank_weights[0], options.rerank_weights[1], options.rerank_weights[2],
                 options.rerank_weights[3]};
    }
    auto reranker = retrieval::make_lexical_reranker(index, weights);

    std::vector<Method> methods = methods_to_compare(options, depth);
    std::printf("%-14s", "method");
    for (const auto& metric : metrics)
      std::printf(" %10s", metric.name.c_str());
    std::printf(" %10s %10s\n", "p50 ms", "p99 ms");
    for (const auto& method : methods)
      print_row(method, metrics, collection, *index, *reranker, depth);
    index.reset();
    if (temporary) std::filesystem::remove_all(directory);
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "chatflow eval-retrieval: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace

void add_eval_retrieval_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<EvalRetrievalOptions>();
  auto* command = app.add_subcommand(
      "eval-retrieval",
      "Measure retrieval quality on a judged collection (SMART or BEIR): BM25, dense, hybrid, "
      "hybrid+rerank");
  command
      ->add_option("--collection", options->collection,
                   "a judged collection's directory: SMART (documents, queries, relevance file) "
                   "or BEIR (corpus.jsonl, queries.jsonl, qrels/)")
      ->required();
  command
      ->add_option("--metric", options->metrics,
                   "ndcg@K, recall@K, mrr[@K], map[@K], comma-separated")
      ->capture_default_str();
  command->add_option("--index", options->index,
                      "keep the index in this directory (default: a temporary one)");
  command->add_option("--depth", options->depth, "candidates per query")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  command->add_option("--chunk-tokens", options->chunk_tokens, "tokens per chunk")
      ->check(CLI::Range(8, 100000))
      ->capture_default_str();
  command->add_option("--overlap", options->overlap, "tokens neighbouring chunks share")
      ->capture_default_str();
  command->add_option("--rrf-k", options->rrf_k, "reciprocal rank fusion's k (--fusion rrf)")
      ->capture_default_str();
  command->add_option("--fusion", options->fusion, "rrf or weighted")
      ->check(CLI::IsMember({"rrf", "weighted"}))
      ->capture_default_str();
  command
      ->add_option("--sparse-weight", options->sparse_weight, "BM25's weight (--fusion weighted)")
      ->capture_default_str();
  command
      ->add_option("--dense-weight", options->dense_weight,
                   "the dense search's weight (--fusion weighted)")
      ->capture_default_str();
  command
      ->add_option("--rerank-weights", options->rerank_weights,
                   "coverage,proximity,sparse,dense (default: the rerank stage's)")
      ->delimiter(',')
      ->expected(4);
  add_embedder_options(*command, options->embedder);
  command->callback(
      [&selected, options] { selected = [options] { return eval_retrieval_command(*options); }; });
}

}  // namespace chatflow::cli
