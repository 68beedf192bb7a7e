// The passages a pipeline retrieves from: one directory holding a Xapian database (BM25 over
// stemmed terms, CJK n-grams, identifiers and numbers as written) and an hnswlib graph of the
// same chunks' vectors, with each chunk's document id, version and ACL labels. Built by
// `chatflow index`; re-indexing a changed document replaces all of its chunks.
//
// ACL: a chunk with no labels is public; otherwise a reader needs one of its labels. Both
// searches apply the reader's labels inside the search, so a restricted chunk never leaves it.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "framework/embedding/embedder.h"
#include "framework/retrieval/documents.h"

namespace chatflow::retrieval {

struct Passage {
  uint32_t id = 0;  // the chunk's number in this index
  std::string document;
  std::string title;
  std::string text;
  std::string version;
  uint32_t chunk = 0;  // its position in the document
  std::vector<std::string> acl;
};

struct ScoredChunk {
  uint32_t id = 0;
  double score = 0;
};

struct ChunkingOptions {
  size_t tokens = 200;
  size_t overlap = 40;
};

struct IndexingReport {
  size_t documents_added = 0;
  size_t documents_replaced = 0;
  size_t documents_unchanged = 0;
  size_t chunks_added = 0;
  size_t chunks_removed = 0;
};

// What a reader may see: their labels (roles, "tenant:T", "user:U"...).
struct Reader {
  std::vector<std::string> labels;
  bool everything = false;  // evaluation and admin tools only
};

// One vector per chunk of a document.
using ChunkVectors = std::vector<std::vector<float>>;

// The vector of each chunk of `source` as RetrievalIndex::add() would make it: slow with a model
// embedder, so done before the index is opened for writing (which other writers wait for).
ChunkVectors embed_chunks(const SourceDocument& source, const ChunkingOptions& options,
                          const embedding::Embedder& embedder);

class RetrievalIndex {
 public:
  // Opens the index in `directory` (creating it when `writable`). The embedder must be the one
  // the index was built with: its description is kept in the index and compared.
  RetrievalIndex(const std::string& directory, std::shared_ptr<const embedding::Embedder> embedder,
                 bool writable);
  ~RetrievalIndex();

  // Adds new documents and replaces changed ones (same id, other version or text); `progress`
  // is called with (documents done, total). Writes everything to disk before returning.
  // `vectors`, when given, holds each document's chunk vectors from embed_chunks().
  IndexingReport add(const std::vector<SourceDocument>& documents, const ChunkingOptions& options,
                     const std::function<void(size_t, size_t)>& progress = nullptr,
                     const std::vector<ChunkVectors>& vectors = {});
  // Removes every document whose id is not in `keep` (a source that no longer has them) and
  // writes the result; returns how many documents went.
  size_t prune(const std::set<std::string>& keep);
  // Removes one document's chunks and writes the result; returns how many chunks went.
  size_t erase(const std::string& document);
  // The ids of the documents in the index.
  std::set<std::string> document_ids() const;

  // BM25 over the query's words (stemmed), phrases for hyphenated identifiers; best first.
  std::vector<ScoredChunk> sparse(const std::string& query, size_t k, const Reader& reader) const;
  // Cosine similarity of the query's vector; best first.
  std::vector<ScoredChunk> dense(const std::vector<float>& query, size_t k,
                                 const Reader& reader) const;
  std::vector<float> embed(const std::string& text) const { return embedder_->embed(text); }

  Passage passage(uint32_t id) const;
  // How many documents containing `word` (lower case, unstemmed): for IDF in rerankers.
  size_t document_frequency(const std::string& word) const;
  size_t chunk_count() const;
  const std::string& directory() const { return directory_; }

 private:
  struct Impl;
  size_t remove(const std::string& document);  // its chunks; not yet written
  void persist();
  std::string directory_;
  std::shared_ptr<const embedding::Embedder> embedder_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chatflow::retrieval
