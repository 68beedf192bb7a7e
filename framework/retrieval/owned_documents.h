// Documents a user uploads into a retrieval index: kept per owner (the tenant and
// Identity::owner(), as sessions are), chunked into the index under a label only that owner's
// requests carry, so they are retrieved for their owner and nobody else. The server's documents
// API (framework/server/document_routes.cpp) reaches them through this interface, offered by a
// `retrieval_index` resource configured with `uploads:`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chatflow::retrieval {

struct DocumentOwner {
  std::string tenant;
  std::string owner;  // Identity::owner(): "user:NAME", "key:ID", or empty without auth
};

// The ACL label of an owner's uploaded chunks; reader_of() gives it to that owner's requests.
inline constexpr const char* kOwnerLabelPrefix = "owner:";
inline std::string owner_label(const DocumentOwner& owner) {
  return kOwnerLabelPrefix + owner.tenant + "/" + owner.owner;
}

struct UploadLimits {
  int64_t max_bytes = 1 << 20;             // one document's text, as uploaded
  int64_t max_documents_per_owner = 100;   // documents one owner keeps
  int64_t max_bytes_per_owner = 20 << 20;  // all of one owner's documents together
};

struct UploadedDocument {
  std::string id;  // "doc-" and 16 hex digits; the `document` of its citations
  std::string name;
  std::string content_type;  // as accepted (text/markdown, ...)
  int64_t bytes = 0;         // of the text as uploaded
  int64_t chunks = 0;
  int64_t created_at = 0;  // Unix seconds
  DocumentOwner owner;
};

// Where one chunk of a document lies in its text (byte offsets, end exclusive).
struct ChunkSpan {
  uint32_t chunk = 0;
  size_t start = 0;
  size_t end = 0;
};

// Every call throws RequestFailure (framework/api/request.h) with the status and OpenAI error
// to answer: 400 (empty, not UTF-8, no name), 413 (a limit), 415 (not text), 503 (the index is
// being written by another process).
class OwnedDocuments {
 public:
  virtual ~OwnedDocuments() = default;
  virtual const UploadLimits& limits() const = 0;
  virtual std::vector<std::string> accepted_types() const = 0;  // media types, as in the 415
  // `content_type` as the client declared it (may be empty); `text` the bytes uploaded.
  virtual UploadedDocument upload(const DocumentOwner& owner, const std::string& name,
                                  const std::string& content_type, const std::string& text) = 0;
  // The owner's documents, newest first.
  virtual std::vector<UploadedDocument> documents_of(const DocumentOwner& owner) const = 0;
  // The owner's document `id` (another owner's answers as none), with its text and chunks.
  virtual std::optional<UploadedDocument> document(const DocumentOwner& owner,
                                                   const std::string& id, std::string* text,
                                                   std::vector<ChunkSpan>* chunks) const = 0;
  // Removes the document and its chunks from the index; false when the owner has no such id.
  virtual bool remove(const DocumentOwner& owner, const std::string& id) = 0;
};

// Offered by a resource (a retrieval_index): its uploads, or nullptr when it takes none.
class OwnedDocumentsProvider {
 public:
  virtual ~OwnedDocumentsProvider() = default;
  virtual OwnedDocuments* owned_documents() const = 0;
};

}  // namespace chatflow::retrieval
