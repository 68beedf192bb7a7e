// retrieval_index: see retrieval_index.h.
#include "stages/retrieval_index.h"

#include <cstdio>
#include <set>

#include "framework/api/registry.h"
#include "stages/embedder.h"

namespace chatflow {

namespace {
std::filesystem::file_time_type manifest_time(const std::string& directory) {
  std::error_code error;
  auto time =
      std::filesystem::last_write_time(std::filesystem::path(directory) / "manifest.json", error);
  return error ? std::filesystem::file_time_type{} : time;
}
}  // namespace

RetrievalIndexResource::RetrievalIndexResource(std::string directory,
                                               std::shared_ptr<const embedding::Embedder> embedder)
    : directory_(std::move(directory)), embedder_(std::move(embedder)) {
  loaded_version_ = manifest_time(directory_);
  index_ = std::make_shared<retrieval::RetrievalIndex>(directory_, embedder_, false);
  checked_ = std::chrono::steady_clock::now();
}

std::shared_ptr<const retrieval::RetrievalIndex> RetrievalIndexResource::current() const {
  std::lock_guard lock(mutex_);
  auto now = std::chrono::steady_clock::now();
  if (now - checked_ < std::chrono::seconds(1)) return index_;
  checked_ = now;
  auto version = manifest_time(directory_);
  if (version != loaded_version_) {
    try {
      index_ = std::make_shared<retrieval::RetrievalIndex>(directory_, embedder_, false);
      loaded_version_ = version;
    } catch (const std::exception& error) {
      // A half-written update: keep serving the revision we have and try again later.
      std::fprintf(stderr, "chatflow: retrieval index %s not reloaded: %s\n", directory_.c_str(),
                   error.what());
    }
  }
  return index_;
}

void RetrievalIndexResource::reload() const {
  auto fresh = std::make_shared<retrieval::RetrievalIndex>(directory_, embedder_, false);
  std::lock_guard lock(mutex_);
  index_ = std::move(fresh);
  loaded_version_ = manifest_time(directory_);
  checked_ = std::chrono::steady_clock::now();
}

void RetrievalIndexResource::accept_uploads(retrieval::ChunkingOptions chunking,
                                            retrieval::UploadLimits limits) {
  uploads_ = std::make_unique<retrieval::DocumentUploads>(directory_, embedder_, chunking, limits,
                                                          [this] { reload(); });
}

namespace {

struct UploadsConfig {
  // A parsed `uploads:` is a fresh UploadsConfig (true); the resource's default is not (false).
  bool declared = true;
  int64_t max_bytes = retrieval::UploadLimits{}.max_bytes;
  int64_t max_documents_per_owner = retrieval::UploadLimits{}.max_documents_per_owner;
  int64_t max_bytes_per_owner = retrieval::UploadLimits{}.max_bytes_per_owner;
};

struct RetrievalIndexConfig {
  std::string path;
  std::string embedder;
  std::vector<std::string> source;
  int64_t chunk_tokens = 200;
  int64_t overlap = 40;
  UploadsConfig uploads{.declared = false};
};

ResourceTypeInfo retrieval_index_resource_type() {
  ResourceTypeBuilder<RetrievalIndexConfig> type(
      "retrieval_index",
      "Chunks to retrieve from: BM25 (Xapian) and vectors (hnswlib) in one directory built by "
      "`chatflow index`, or from `source` files at start.");
  type.config().key("path", &RetrievalIndexConfig::path, "the index directory").required();
  type.config()
      .key("embedder", &RetrievalIndexConfig::embedder,
           "an embedder resource (declared before this one); default: n-grams")
      .resource("embedder");
  type.config().key("source", &RetrievalIndexConfig::source,
                    "folders, .jsonl or SMART files to index at start (changed documents are "
                    "replaced, unchanged ones kept)");
  type.config()
      .key("chunk_tokens", &RetrievalIndexConfig::chunk_tokens,
           "with source or uploads: tokens per chunk")
      .range(8, 100000);
  type.config()
      .key("overlap", &RetrievalIndexConfig::overlap,
           "with source or uploads: tokens shared by neighbours")
      .range(0, 100000);
  SchemaBuilder<UploadsConfig> uploads;
  uploads
      .key("max_bytes", &UploadsConfig::max_bytes,
           "bytes one uploaded document may have (the server's max_body_bytes also applies)")
      .range(1, int64_t{1} << 32);
  uploads
      .key("max_documents_per_owner", &UploadsConfig::max_documents_per_owner,
           "documents one user (or key without a user) keeps")
      .range(1, 1'000'000);
  uploads
      .key("max_bytes_per_owner", &UploadsConfig::max_bytes_per_owner,
           "bytes all of one user's documents may hold together")
      .range(1, int64_t{1} << 40);
  type.config().object("uploads", &RetrievalIndexConfig::uploads, uploads,
                       "take documents users upload (POST /v1/documents), each retrieved for "
                       "its owner only; absent: no uploads");
  type.create([](const RetrievalIndexConfig& config,
                 ResourceContext& context) -> std::shared_ptr<Resource> {
    std::shared_ptr<const embedding::Embedder> embedder = embedder_named(context, config.embedder);
    if (config.overlap >= config.chunk_tokens)
      throw ConfigError("'overlap' must be smaller than 'chunk_tokens'");
    try {
      if (!config.source.empty()) {
        std::vector<retrieval::SourceDocument> documents;
        for (const auto& source : config.source) {
          auto loaded = retrieval::load_documents(source);
          documents.insert(documents.end(), loaded.begin(), loaded.end());
        }
        retrieval::RetrievalIndex writer(config.path, embedder, true);
        writer.add(documents,
                   {static_cast<size_t>(config.chunk_tokens), static_cast<size_t>(config.overlap)});
      }
      if (config.uploads.declared &&
          !std::filesystem::exists(std::filesystem::path(config.path) / "manifest.json")) {
        retrieval::RetrievalIndex empty(config.path, embedder, true);  // nothing uploaded yet
        empty.add({},
                  {static_cast<size_t>(config.chunk_tokens), static_cast<size_t>(config.overlap)});
      }
      auto resource = std::make_shared<RetrievalIndexResource>(config.path, embedder);
      if (config.uploads.declared) {
        resource->accept_uploads(
            {static_cast<size_t>(config.chunk_tokens), static_cast<size_t>(config.overlap)},
            {config.uploads.max_bytes, config.uploads.max_documents_per_owner,
             config.uploads.max_bytes_per_owner});
      }
      return resource;
    } catch (const std::runtime_error& error) {
      throw ConfigError(error.what());
    }
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(retrieval_index_resource_type);

}  // namespace
}  // namespace chatflow
