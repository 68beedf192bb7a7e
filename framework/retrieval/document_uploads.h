// OwnedDocuments kept beside a retrieval index: `<index>/uploads/documents.json` lists every
// uploaded document (id, name, type, bytes, chunks, created_at, owner), `<index>/uploads/<id>.txt`
// holds its text, and its chunks are in the index itself, labelled owner_label(owner). Each upload
// or removal opens the index for writing, changes it, writes it and closes it again (under a
// file lock, starting from the list as it is on disk: another process may share the directory), so
// `chatflow index` may still update the same directory between them; then `index_changed` runs
// (the resource swaps in the new revision before the request answers).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "framework/embedding/embedder.h"
#include "framework/retrieval/owned_documents.h"
#include "framework/retrieval/retrieval_index.h"

namespace chatflow::retrieval {

// The media types an upload may have; anything else is a 415 naming these.
const std::vector<std::string>& accepted_upload_types();

// The type an upload is taken as: the declared one without parameters when it is accepted, else
// (none declared, or application/octet-stream) the one its name's extension says. Throws
// RequestFailure 415 otherwise.
std::string upload_type(const std::string& name, const std::string& declared);

// The text an uploaded body becomes: checked (UTF-8, no NUL bytes, not empty), a byte-order mark
// dropped, HTML reduced to its text. Throws RequestFailure 400 or 415.
std::string upload_text(const std::string& type, std::string_view body);

class DocumentUploads final : public OwnedDocuments {
 public:
  DocumentUploads(std::string index_directory, std::shared_ptr<const embedding::Embedder> embedder,
                  ChunkingOptions chunking, UploadLimits limits,
                  std::function<void()> index_changed);

  const UploadLimits& limits() const override { return limits_; }
  std::vector<std::string> accepted_types() const override { return accepted_upload_types(); }
  UploadedDocument upload(const DocumentOwner& owner, const std::string& name,
                          const std::string& content_type, const std::string& text) override;
  std::vector<UploadedDocument> documents_of(const DocumentOwner& owner) const override;
  std::optional<UploadedDocument> document(const DocumentOwner& owner, const std::string& id,
                                           std::string* text,
                                           std::vector<ChunkSpan>* chunks) const override;
  bool remove(const DocumentOwner& owner, const std::string& id) override;

 private:
  class ListLock;
  std::unique_ptr<RetrievalIndex> open_writer() const;
  void refresh_list() const;  // with mutex_ held
  void save_list() const;     // with mutex_ held (and the ListLock)
  // Refuses (413) an upload of `document` that would pass the owner's limits; with mutex_ held.
  void check_room(const DocumentOwner& owner, const UploadedDocument& document) const;
  std::string text_path(const std::string& id) const;

  std::string index_directory_;
  std::string uploads_directory_;
  std::shared_ptr<const embedding::Embedder> embedder_;
  ChunkingOptions chunking_;
  UploadLimits limits_;
  std::function<void()> index_changed_;
  mutable std::mutex mutex_;  // one change at a time; guards documents_ and the list's time
  mutable std::vector<UploadedDocument> documents_;
  mutable std::filesystem::file_time_type list_time_;  // of documents.json when last read
  mutable bool list_read_ = false;
};

}  // namespace chatflow::retrieval
