#include "framework/retrieval/retrieval_index.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <boost/json.hpp>
#include <xapian.h>

#include "framework/embedding/vector_graph.h"
#include "framework/retrieval/owned_documents.h"
#include "framework/retrieval/stopwords.h"
#include "framework/text/hash.h"

namespace chatflow::retrieval {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr int kFormat = 1;
const char* const kDocumentPrefix = "XD";  // boolean: every chunk of one document
const char* const kLabelPrefix = "XA";     // boolean: one ACL label
const char* const kPublicTerm = "XP";      // boolean: a chunk without labels

std::string hash_hex(std::string_view text) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
  return hex;
}

// Xapian terms are at most 245 bytes: long labels and ids are hashed.
std::string boolean_term(const char* prefix, const std::string& value) {
  return value.size() <= 64 ? prefix + value : prefix + std::string("#") + hash_hex(value);
}

std::string content_hash(const SourceDocument& document) {
  std::string all = document.version + '\x1f' + document.title + '\x1f' + document.text;
  for (const auto& label : document.acl)
    all += '\x1f' + label;
  return hash_hex(all);
}

}  // namespace

struct RetrievalIndex::Impl {
  struct ChunkAccess {
    bool live = false;
    bool is_public = false;
    std::vector<std::string> labels;
  };

  std::string sparse_path;
  std::string dense_path;
  std::string manifest_path;
  std::unique_ptr<Xapian::WritableDatabase> writer;
  mutable std::mutex readers_mutex;
  mutable std::vector<std::unique_ptr<Xapian::Database>> readers;
  std::unique_ptr<embedding::VectorGraph> graph;
  std::vector<ChunkAccess> access;  // by chunk id
  size_t live_chunks = 0;
  ChunkingOptions chunking;  // as last used, for the manifest
  Xapian::SimpleStopper stopper{stopwords().begin(), stopwords().end()};

  // Xapian database objects are not safe to share between threads: one per concurrent search.
  class Lease {
   public:
    explicit Lease(const Impl& impl) : impl_(impl) {
      std::lock_guard lock(impl.readers_mutex);
      if (!impl.readers.empty()) {
        database_ = std::move(impl.readers.back());
        impl.readers.pop_back();
      }
      if (!database_) database_ = std::make_unique<Xapian::Database>(impl.sparse_path);
    }
    ~Lease() {
      std::lock_guard lock(impl_.readers_mutex);
      impl_.readers.push_back(std::move(database_));
    }
    Xapian::Database& operator*() { return *database_; }
    Xapian::Database* operator->() { return database_.get(); }

   private:
    const Impl& impl_;
    std::unique_ptr<Xapian::Database> database_;
  };

  bool visible(uint32_t id, const Reader& reader) const {
    if (id >= access.size() || !access[id].live) return false;
    if (reader.everything || access[id].is_public) return true;
    for (const auto& label : access[id].labels) {
      if (std::find(reader.labels.begin(), reader.labels.end(), label) != reader.labels.end())
        return true;
    }
    return false;
  }

  void remember(uint32_t id, const std::vector<std::string>& labels) {
    if (access.size() <= id) access.resize(id + 1);
    access[id] = {true, labels.empty(), labels};
    ++live_chunks;
  }
};

RetrievalIndex::RetrievalIndex(const std::string& directory,
                               std::shared_ptr<const embedding::Embedder> embedder, bool writable)
    : directory_(directory), embedder_(std::move(embedder)), impl_(std::make_unique<Impl>()) {
  Impl& impl = *impl_;
  fs::path root(directory);
  impl.sparse_path = (root / "sparse").string();
  impl.dense_path = (root / "dense.hnsw").string();
  impl.manifest_path = (root / "manifest.json").string();
  std::error_code error;
  bool exists = fs::exists(impl.manifest_path, error);
  if (!exists && !writable) {
    throw std::runtime_error(directory +
                             ": no retrieval index here (build one with `chatflow index`)");
  }
  if (exists) {
    std::ifstream in(impl.manifest_path);
    std::stringstream text;
    text << in.rdbuf();
    boost::system::error_code parse_error;
    json::value manifest = json::parse(text.str(), parse_error);
    if (parse_error || !manifest.is_object() || !manifest.get_object().if_contains("embedder")) {
      throw std::runtime_error(impl.manifest_path + ": not a chatflow index manifest");
    }
    std::string built_with(manifest.at("embedder").as_string());
    const json::object& fields = manifest.get_object();
    if (auto* tokens = fields.if_contains("chunk_tokens"); tokens && tokens->is_number())
      impl.chunking.tokens = tokens->to_number<size_t>();
    if (auto* overlap = fields.if_contains("chunk_overlap"); overlap && overlap->is_number())
      impl.chunking.overlap = overlap->to_number<size_t>();
    if (built_with != embedder_->describe()) {
      throw std::runtime_error(directory + ": the index was built with embedder '" + built_with +
                               "', this pipeline's is '" + embedder_->describe() +
                               "'; rebuild it or configure the same embedder");
    }
  } else {
    fs::create_directories(root);
  }
  if (writable) {
    impl.writer =
        std::make_unique<Xapian::WritableDatabase>(impl.sparse_path, Xapian::DB_CREATE_OR_OPEN);
  }
  if (fs::exists(impl.dense_path, error)) {
    impl.graph = embedding::VectorGraph::load(impl.dense_path, embedder_->dimensions(), 128);
  } else {
    impl.graph =
        std::make_unique<embedding::VectorGraph>(embedder_->dimensions(), 1024, 16, 100, 128);
  }
  // Who may read each chunk, kept in memory for the dense side's filter.
  Xapian::Database database(impl.sparse_path);
  for (auto it = database.postlist_begin(""); it != database.postlist_end(""); ++it) {
    Xapian::Document document = database.get_document(*it);
    json::value data = json::parse(document.get_data());
    std::vector<std::string> labels;
    for (const auto& label : data.at("acl").as_array())
      labels.push_back(std::string(label.as_string()));
    impl.remember(*it, labels);
  }
}

RetrievalIndex::~RetrievalIndex() = default;

namespace {
// The chunks a document is indexed as; a document of no words is one empty chunk.
std::vector<std::string> index_chunks(const SourceDocument& source,
                                      const ChunkingOptions& options) {
  std::vector<std::string> chunks = chunk_text(source.text, options.tokens, options.overlap);
  if (chunks.empty()) chunks.push_back("");
  return chunks;
}

std::string embedded_text(const SourceDocument& source, const std::string& chunk) {
  return source.title + "\n" + chunk;
}
}  // namespace

ChunkVectors embed_chunks(const SourceDocument& source, const ChunkingOptions& options,
                          const embedding::Embedder& embedder) {
  ChunkVectors vectors;
  for (const std::string& chunk : index_chunks(source, options))
    vectors.push_back(embedder.embed(embedded_text(source, chunk)));
  return vectors;
}

IndexingReport RetrievalIndex::add(const std::vector<SourceDocument>& documents,
                                   const ChunkingOptions& options,
                                   const std::function<void(size_t, size_t)>& progress,
                                   const std::vector<ChunkVectors>& vectors) {
  Impl& impl = *impl_;
  if (!impl.writer) throw std::logic_error("the retrieval index was opened read-only");
  if (!vectors.empty() && vectors.size() != documents.size())
    throw std::logic_error("chunk vectors for " + std::to_string(vectors.size()) + " of " +
                           std::to_string(documents.size()) + " documents");
  IndexingReport report;
  Xapian::TermGenerator terms;
  terms.set_stemmer(Xapian::Stem("english"));
  terms.set_stemming_strategy(Xapian::TermGenerator::STEM_SOME);
  terms.set_flags(Xapian::TermGenerator::FLAG_CJK_NGRAM);
  size_t done = 0;
  for (const auto& source : documents) {
    std::string hash = content_hash(source);
    std::string document_term = boolean_term(kDocumentPrefix, source.id);
    bool existed = false;
    bool unchanged = false;
    for (auto it = impl.writer->postlist_begin(document_term);
         it != impl.writer->postlist_end(document_term); ++it) {
      existed = true;
      json::value data = json::parse(impl.writer->get_document(*it).get_data());
      unchanged = data.at("hash").as_string() == hash;
      break;
    }
    if (unchanged) {
      ++report.documents_unchanged;
    } else {
      if (existed) {
        report.chunks_removed += remove(source.id);
        ++report.documents_replaced;
      } else {
        ++report.documents_added;
      }
      json::array acl;
      for (const auto& label : source.acl)
        acl.push_back(json::string(label));
      std::vector<std::string> chunks = index_chunks(source, options);
      const ChunkVectors* given = vectors.empty() ? nullptr : &vectors[done];
      if (given && given->size() != chunks.size()) {
        throw std::logic_error("document " + source.id + " has " + std::to_string(given->size()) +
                               " chunk vectors for " + std::to_string(chunks.size()) + " chunks");
      }
      for (uint32_t number = 0; number < chunks.size(); ++number) {
        Xapian::Document chunk;
        chunk.set_data(json::serialize(json::object{{"document", source.id},
                                                    {"title", source.title},
                                                    {"text", chunks[number]},
                                                    {"version", source.version},
                                                    {"chunk", number},
                                                    {"acl", acl},
                                                    {"hash", hash}}));
        terms.set_document(chunk);
        terms.index_text(source.title);
        terms.increase_termpos();
        terms.index_text(chunks[number]);
        chunk.add_boolean_term(document_term);
        if (source.acl.empty()) chunk.add_boolean_term(kPublicTerm);
        for (const auto& label : source.acl)
          chunk.add_boolean_term(boolean_term(kLabelPrefix, label));
        Xapian::docid id = impl.writer->add_document(chunk);
        if (!given) {
          std::vector<float> vector = embedder_->embed(embedded_text(source, chunks[number]));
          impl.graph->add(vector.data(), id);
        } else {
          const std::vector<float>& vector = (*given)[number];
          if (vector.size() != embedder_->dimensions())
            throw std::logic_error("document " + source.id + ": a chunk vector of the wrong size");
          impl.graph->add(vector.data(), id);
        }
        impl.remember(id, source.acl);
        ++report.chunks_added;
      }
    }
    ++done;
    if (progress) progress(done, documents.size());
  }
  impl.chunking = options;
  persist();
  return report;
}

void RetrievalIndex::persist() {
  Impl& impl = *impl_;
  impl.writer->commit();
  // hnswlib loads a saved graph of no elements with room for none, and growing it from there
  // fails: an index that never had a vector keeps no graph file (a fresh graph is made instead).
  if (impl.graph->size() > 0) impl.graph->save(impl.dense_path);
  std::ofstream manifest(impl.manifest_path, std::ios::trunc);
  manifest << json::serialize(json::object{{"format", kFormat},
                                           {"embedder", embedder_->describe()},
                                           {"dimensions", embedder_->dimensions()},
                                           {"chunk_tokens", impl.chunking.tokens},
                                           {"chunk_overlap", impl.chunking.overlap},
                                           {"chunks", impl.live_chunks}})
           << "\n";
  if (!manifest) throw std::runtime_error(impl.manifest_path + ": cannot write the manifest");
  std::lock_guard lock(impl.readers_mutex);
  impl.readers.clear();  // they would see the old revision
}

size_t RetrievalIndex::prune(const std::set<std::string>& keep) {
  // Documents users uploaded (their chunks carry an owner label) are no source's to prune.
  std::set<std::string> uploaded;
  for (auto it = impl_->writer->postlist_begin(""); it != impl_->writer->postlist_end(""); ++it) {
    json::value data = json::parse(impl_->writer->get_document(*it).get_data());
    for (const auto& label : data.at("acl").as_array()) {
      if (label.as_string().starts_with(kOwnerLabelPrefix))
        uploaded.insert(std::string(data.at("document").as_string()));
    }
  }
  size_t removed = 0;
  for (const auto& document : document_ids()) {
    if (keep.count(document) || uploaded.count(document)) continue;
    remove(document);
    ++removed;
  }
  if (removed > 0) persist();
  return removed;
}

size_t RetrievalIndex::erase(const std::string& document) {
  size_t removed = remove(document);
  persist();
  return removed;
}

std::set<std::string> RetrievalIndex::document_ids() const {
  std::set<std::string> ids;
  const Impl& impl = *impl_;
  auto collect = [&](Xapian::Database& database) {
    for (auto it = database.postlist_begin(""); it != database.postlist_end(""); ++it) {
      json::value data = json::parse(database.get_document(*it).get_data());
      ids.insert(std::string(data.at("document").as_string()));
    }
  };
  if (impl.writer) {
    collect(*impl.writer);
  } else {
    Impl::Lease database(impl);
    collect(*database);
  }
  return ids;
}

size_t RetrievalIndex::remove(const std::string& document) {
  Impl& impl = *impl_;
  if (!impl.writer) throw std::logic_error("the retrieval index was opened read-only");
  std::string term = boolean_term(kDocumentPrefix, document);
  std::vector<Xapian::docid> ids;
  for (auto it = impl.writer->postlist_begin(term); it != impl.writer->postlist_end(term); ++it)
    ids.push_back(*it);
  for (Xapian::docid id : ids) {
    impl.writer->delete_document(id);
    impl.graph->remove(id);
    impl.access[id].live = false;
    --impl.live_chunks;
  }
  return ids.size();
}

std::vector<ScoredChunk> RetrievalIndex::sparse(const std::string& query, size_t k,
                                                const Reader& reader) const {
  const Impl& impl = *impl_;
  Impl::Lease database(impl);
  Xapian::QueryParser parser;
  parser.set_stemmer(Xapian::Stem("english"));
  parser.set_stemming_strategy(Xapian::QueryParser::STEM_SOME);
  parser.set_stopper(&impl.stopper);
  parser.set_default_op(Xapian::Query::OP_OR);
  parser.set_database(*database);
  Xapian::Query parsed;
  try {
    parsed = parser.parse_query(
        query, Xapian::QueryParser::FLAG_PHRASE | Xapian::QueryParser::FLAG_CJK_NGRAM);
  } catch (const Xapian::QueryParserError&) {
    parsed = parser.parse_query(query, Xapian::QueryParser::FLAG_CJK_NGRAM);
  }
  if (parsed.empty()) return {};
  if (!reader.everything) {
    std::vector<Xapian::Query> allowed{Xapian::Query(kPublicTerm)};
    for (const auto& label : reader.labels)
      allowed.emplace_back(boolean_term(kLabelPrefix, label));
    parsed = Xapian::Query(Xapian::Query::OP_FILTER, parsed,
                           Xapian::Query(Xapian::Query::OP_OR, allowed.begin(), allowed.end()));
  }
  Xapian::Enquire enquire(*database);
  enquire.set_query(parsed);
  enquire.set_weighting_scheme(Xapian::BM25Weight(1.2, 0, 1, 0.75, 0.5));
  Xapian::MSet matches = enquire.get_mset(0, static_cast<Xapian::doccount>(k));
  std::vector<ScoredChunk> result;
  for (auto it = matches.begin(); it != matches.end(); ++it)
    result.push_back({*it, it.get_weight()});
  return result;
}

std::vector<ScoredChunk> RetrievalIndex::dense(const std::vector<float>& query, size_t k,
                                               const Reader& reader) const {
  const Impl& impl = *impl_;
  size_t total = impl.graph->size();
  if (total == 0 || k == 0) return {};
  // hnswlib 0.6 has no filter callback: ask for more until enough readable chunks come back.
  for (size_t asked = std::max<size_t>(k * 2, 32);; asked *= 4) {
    asked = std::min(asked, total);
    std::vector<ScoredChunk> result;
    for (const auto& [label, similarity] : impl.graph->search(query.data(), asked)) {
      auto id = static_cast<uint32_t>(label);
      if (!impl.visible(id, reader)) continue;
      result.push_back({id, static_cast<double>(similarity)});
      if (result.size() == k) break;
    }
    if (result.size() == k || asked >= total) return result;
  }
}

Passage RetrievalIndex::passage(uint32_t id) const {
  Impl::Lease database(*impl_);
  json::value data = json::parse(database->get_document(id).get_data());
  Passage passage;
  passage.id = id;
  passage.document = std::string(data.at("document").as_string());
  passage.title = std::string(data.at("title").as_string());
  passage.text = std::string(data.at("text").as_string());
  passage.version = std::string(data.at("version").as_string());
  passage.chunk = static_cast<uint32_t>(data.at("chunk").to_number<int64_t>());
  for (const auto& label : data.at("acl").as_array())
    passage.acl.push_back(std::string(label.as_string()));
  return passage;
}

size_t RetrievalIndex::document_frequency(const std::string& word) const {
  Impl::Lease database(*impl_);
  return database->get_termfreq(word);
}

size_t RetrievalIndex::chunk_count() const {
  return impl_->live_chunks;
}

}  // namespace chatflow::retrieval
