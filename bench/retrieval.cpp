// chatflow bench-retrieval: indexes generated documents (Zipf-distributed made-up words, one
// chunk each) and measures indexing throughput, the index's size on disk, and hybrid retrieval
// latency (BM25 and dense side by side, fused, as the hybrid_retrieval stage runs it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/retrieval/evaluation.h"
#include "framework/retrieval/hybrid.h"

namespace chatflow::cli {
namespace {

struct BenchRetrievalOptions {
  size_t chunks = 100000;
  size_t words = 120;
  size_t vocabulary = 30000;
  size_t queries = 2000;
  uint64_t seed = 1;
  std::string index;  // keep the index here (default: a temporary directory, removed)
};

std::vector<std::string> make_vocabulary(size_t size, std::mt19937_64& random) {
  static const char* const kSyllables[] = {"ka", "lo", "mi", "ra", "te", "vu", "no",
                                           "si", "da", "pe", "zu", "ho", "bi", "fa",
                                           "gu", "ye", "an", "or", "el", "is"};
  std::uniform_int_distribution<size_t> syllable(0, std::size(kSyllables) - 1);
  std::uniform_int_distribution<int> length(2, 4);
  std::vector<std::string> words;
  words.reserve(size);
  for (size_t i = 0; i < size; ++i) {
    std::string word;
    for (int s = length(random); s > 0; --s)
      word += kSyllables[syllable(random)];
    words.push_back(std::move(word));
  }
  return words;
}

class ZipfWords {
 public:
  ZipfWords(const std::vector<std::string>& words, double exponent) : words_(words) {
    double total = 0;
    for (size_t rank = 1; rank <= words.size(); ++rank) {
      total += 1.0 / std::pow(static_cast<double>(rank), exponent);
      cumulative_.push_back(total);
    }
    for (auto& value : cumulative_)
      value /= total;
  }
  const std::string& operator()(std::mt19937_64& random) const {
    double u = std::uniform_real_distribution<double>(0, 1)(random);
    size_t index = static_cast<size_t>(std::lower_bound(cumulative_.begin(), cumulative_.end(), u) -
                                       cumulative_.begin());
    return words_[std::min(index, words_.size() - 1)];
  }

 private:
  const std::vector<std::string>& words_;
  std::vector<double> cumulative_;
};

// Zipf-distributed text with one identifier per document (for BM25 to find); every tenth
// document is restricted to readers of another group.
std::vector<retrieval::SourceDocument> synthetic_documents(const BenchRetrievalOptions& options,
                                                           const ZipfWords& zipf,
                                                           std::mt19937_64& random) {
  std::vector<retrieval::SourceDocument> documents;
  documents.reserve(options.chunks);
  for (size_t i = 0; i < options.chunks; ++i) {
    retrieval::SourceDocument document;
    document.id = "doc-" + std::to_string(i);
    document.title = zipf(random) + " " + zipf(random);
    for (size_t w = 0; w < options.words; ++w)
      document.text += (w ? " " : "") + zipf(random);
    document.text += " ID-" + std::to_string(i);
    if (i % 10 == 0) document.acl = {"restricted"};
    documents.push_back(std::move(document));
  }
  return documents;
}

struct QueryResults {
  std::vector<double> latencies_ms;
  size_t identifiers_found = 0;
  size_t identifier_queries = 0;
};

// Every tenth query asks for one document's identifier; the rest are Zipf words. The first 50
// warm the caches and are not counted.
QueryResults run_queries(const retrieval::RetrievalIndex& index,
                         const BenchRetrievalOptions& options, const ZipfWords& zipf,
                         const retrieval::HybridOptions& hybrid, std::mt19937_64& random) {
  retrieval::Reader reader{{"staff"}};
  std::uniform_int_distribution<size_t> query_length(3, 6);
  std::uniform_int_distribution<size_t> any_document(0, options.chunks - 1);
  QueryResults results;
  for (size_t q = 0; q < options.queries + 50; ++q) {
    std::string query;
    bool identifier = q % 10 == 0;
    size_t target = any_document(random);
    if (identifier) {
      query = "ID-" + std::to_string(target);
    } else {
      for (size_t w = query_length(random); w > 0; --w)
        query += zipf(random) + " ";
    }
    auto begin = std::chrono::steady_clock::now();
    auto candidates = retrieval::hybrid_search(index, query, hybrid, reader);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    if (q < 50) continue;
    results.latencies_ms.push_back(ms);
    if (identifier && target % 10 != 0) {
      ++results.identifier_queries;
      results.identifiers_found +=
          std::any_of(candidates.begin(), candidates.end(), [&](const auto& candidate) {
            return candidate.passage.document == "doc-" + std::to_string(target);
          });
    }
  }
  return results;
}

uint64_t directory_bytes(const std::filesystem::path& directory) {
  uint64_t bytes = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory))
    if (entry.is_regular_file()) bytes += entry.file_size();
  return bytes;
}

// Its own catch: the message names the command ("chatflow bench-retrieval: ..."), as it always has.
int bench_retrieval_command(const BenchRetrievalOptions& options) {
  try {
    std::mt19937_64 random(options.seed);
    auto vocabulary = make_vocabulary(options.vocabulary, random);
    ZipfWords zipf(vocabulary, 1.0);
    std::vector<retrieval::SourceDocument> documents = synthetic_documents(options, zipf, random);
    std::filesystem::path directory =
        options.index.empty() ? std::filesystem::temp_directory_path() /
                                    ("chatflow-bench-retrieval-" + std::to_string(::getpid()))
                              : std::filesystem::path(options.index);
    std::filesystem::remove_all(directory);
    std::shared_ptr<const embedding::Embedder> embedder = embedding::make_ngram_embedder(256, 3);
    double indexing_seconds = 0;
    {
      retrieval::RetrievalIndex writer(directory.string(), embedder, true);
      auto started = std::chrono::steady_clock::now();
      writer.add(documents, {options.words + 64, 0});
      indexing_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    }
    uint64_t bytes = directory_bytes(directory);
    auto index = std::make_shared<retrieval::RetrievalIndex>(directory.string(), embedder, false);
    retrieval::HybridOptions hybrid;  // the stage's defaults: 50 + 50 candidates, RRF, top 20
    QueryResults results = run_queries(*index, options, zipf, hybrid, random);
    const std::vector<double>& latencies = results.latencies_ms;
    std::printf("chunks indexed:             %zu (%zu words each, ngrams 256-d vectors)\n",
                options.chunks, options.words);
    std::printf("indexing:                   %.1f s, %.0f chunks/s\n", indexing_seconds,
                static_cast<double>(options.chunks) / indexing_seconds);
    std::printf("index on disk:              %.1f MiB (%.0f bytes per chunk)\n",
                static_cast<double>(bytes) / (1024.0 * 1024.0),
                static_cast<double>(bytes) / static_cast<double>(options.chunks));
    std::printf("hybrid retrieval, %zu queries: p50 %.3f ms  p90 %.3f ms  p99 %.3f ms\n",
                latencies.size(), retrieval::percentile(latencies, 0.5),
                retrieval::percentile(latencies, 0.9), retrieval::percentile(latencies, 0.99));
    std::printf("identifier queries with their document in the top %zu: %zu of %zu\n", hybrid.top_k,
                results.identifiers_found, results.identifier_queries);
    index.reset();
    if (options.index.empty()) std::filesystem::remove_all(directory);
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "chatflow bench-retrieval: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace

void add_bench_retrieval_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<BenchRetrievalOptions>();
  auto* command = app.add_subcommand(
      "bench-retrieval",
      "Index generated documents and measure indexing speed, index size and hybrid retrieval "
      "latency");
  command->add_option("--chunks", options->chunks, "documents (one chunk each)")
      ->check(CLI::Range(size_t{100}, size_t{100000000}))
      ->capture_default_str();
  command->add_option("--words", options->words, "words per chunk")
      ->check(CLI::Range(size_t{1}, size_t{100000}))
      ->capture_default_str();
  command->add_option("--queries", options->queries, "timed queries")
      ->check(CLI::Range(size_t{1}, size_t{10000000}))
      ->capture_default_str();
  command->add_option("--index", options->index, "keep the index in this directory");
  command->callback(
      [&selected, options] { selected = [options] { return bench_retrieval_command(*options); }; });
}

}  // namespace chatflow::cli
