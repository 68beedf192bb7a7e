// chatflow index INPUT... --out DIR: chunks documents (folders of .txt/.md, JSONL, SMART) and
// builds or updates the sparse and dense indexes a retrieval pipeline reads.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/retrieval/retrieval_index.h"

namespace chatflow::cli {
namespace {

struct IndexOptions {
  std::vector<std::string> inputs;
  std::string out;
  bool prune = false;  // drop indexed documents the inputs no longer have
  size_t chunk_tokens = 200;
  size_t overlap = 40;
  EmbedderOptions embedder;
};

uint64_t directory_bytes(const std::filesystem::path& directory) {
  uint64_t bytes = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory, error)) {
    if (entry.is_regular_file(error)) bytes += entry.file_size(error);
  }
  return bytes;
}

// Its own catch: the message names the command ("chatflow index: ..."), as it always has.
int index_command(const IndexOptions& options) {
  try {
    std::vector<retrieval::SourceDocument> documents;
    for (const auto& input : options.inputs) {
      auto loaded = retrieval::load_documents(input);
      documents.insert(documents.end(), std::make_move_iterator(loaded.begin()),
                       std::make_move_iterator(loaded.end()));
    }
    std::shared_ptr<const embedding::Embedder> embedder =
        embedding::make_embedder(options.embedder.kind, options.embedder.path,
                                 options.embedder.dimensions, options.embedder.ngram);
    retrieval::RetrievalIndex index(options.out, embedder, /*writable=*/true);
    retrieval::ChunkingOptions chunking{options.chunk_tokens, options.overlap};
    bool terminal = isatty(STDERR_FILENO);
    int shown = -1;
    auto started = std::chrono::steady_clock::now();
    auto progress = [&](size_t done, size_t total) {
      int percent = static_cast<int>(done * 100 / std::max<size_t>(total, 1));
      if (!terminal || percent == shown) return;
      shown = percent;
      int filled = percent / 4;
      std::fprintf(stderr, "\r[%.*s%*s] %3d%%  %zu/%zu documents", filled,
                   "#########################", 25 - filled, "", percent, done, total);
      if (done == total) std::fputc('\n', stderr);
    };
    retrieval::IndexingReport report = index.add(documents, chunking, progress);
    size_t pruned = 0;
    if (options.prune) {
      std::set<std::string> keep;
      for (const auto& document : documents)
        keep.insert(document.id);
      pruned = index.prune(keep);
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf(
        "%zu documents: %zu added, %zu replaced, %zu unchanged; %zu chunks added, %zu removed "
        "in %.2f s (%.0f chunks/s)\n",
        documents.size(), report.documents_added, report.documents_replaced,
        report.documents_unchanged, report.chunks_added, report.chunks_removed, seconds,
        seconds > 0 ? static_cast<double>(report.chunks_added) / seconds : 0.0);
    if (options.prune) std::printf("pruned %zu documents no longer in the inputs\n", pruned);
    std::printf("%s: %zu chunks, %.1f MiB on disk, embedder %s\n", options.out.c_str(),
                index.chunk_count(),
                static_cast<double>(directory_bytes(options.out)) / (1024.0 * 1024.0),
                embedder->describe().c_str());
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "chatflow index: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace

void add_index_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<IndexOptions>();
  auto* command = app.add_subcommand(
      "index", "Chunk documents (.txt/.md folders, JSONL, SMART) into a retrieval index");
  command->add_option("inputs", options->inputs, "folders, .jsonl or SMART files")->required();
  command->add_option("--out,-o", options->out, "the index directory (created or updated)")
      ->required();
  command->add_option("--chunk-tokens", options->chunk_tokens, "tokens per chunk")
      ->check(CLI::Range(8, 100000))
      ->capture_default_str();
  command->add_option("--overlap", options->overlap, "tokens neighbouring chunks share")
      ->capture_default_str();
  command->add_flag("--prune", options->prune,
                    "remove indexed documents that are not in the inputs any more");
  add_embedder_options(*command, options->embedder);
  command->callback(
      [&selected, options] { selected = [options] { return index_command(*options); }; });
}

}  // namespace chatflow::cli
