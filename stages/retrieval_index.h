// The `retrieval_index` resource: a directory built by `chatflow index` (or, with `source`,
// built and brought up to date from those files at start). When `chatflow index` updates the
// directory while serving, the next request after the manifest changes sees the new revision.
// With `uploads:` it also keeps documents users upload (the server's /v1/documents), each
// retrievable by its owner only; an upload is seen by the next request.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>

#include "framework/api/request.h"
#include "framework/api/resource.h"
#include "framework/retrieval/document_uploads.h"
#include "framework/retrieval/hybrid.h"
#include "framework/retrieval/owned_documents.h"
#include "framework/retrieval/retrieval_index.h"

namespace chatflow {

class RetrievalIndexResource final : public Resource, public retrieval::OwnedDocumentsProvider {
 public:
  RetrievalIndexResource(std::string directory,
                         std::shared_ptr<const embedding::Embedder> embedder);

  // The newest revision on disk (checked at most once a second).
  std::shared_ptr<const retrieval::RetrievalIndex> current() const;
  // Reads the revision on disk now (after an upload changed it).
  void reload() const;

  // Takes uploads from now on (the resource's `uploads:`).
  void accept_uploads(retrieval::ChunkingOptions chunking, retrieval::UploadLimits limits);
  retrieval::OwnedDocuments* owned_documents() const override { return uploads_.get(); }

 private:
  std::unique_ptr<retrieval::DocumentUploads> uploads_;
  std::string directory_;
  std::shared_ptr<const embedding::Embedder> embedder_;
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const retrieval::RetrievalIndex> index_;
  mutable std::filesystem::file_time_type loaded_version_;
  mutable std::chrono::steady_clock::time_point checked_;
};

}  // namespace chatflow

namespace chatflow {
// Attachments retrieval stages leave for each other.
inline const char* const kRetrievalQuery = "retrieval.query";            // std::string
inline const char* const kRetrievalCandidates = "retrieval.candidates";  // vector<Candidate>

// The candidates become the request's context passages, each with the score that ordered it
// (&Candidate::fused after retrieval, &Candidate::rerank after a rerank).
inline void use_as_context(Request& request, const std::vector<retrieval::Candidate>& candidates,
                           double retrieval::Candidate::*score) {
  request.context_passages.clear();
  for (const auto& candidate : candidates) {
    const retrieval::Passage& passage = candidate.passage;
    request.context_passages.push_back(
        {passage.text, passage.document, passage.title, passage.chunk, candidate.*score});
  }
}

// Who reads the index for a caller: its roles, "tenant:<t>", "user:<u>" and its uploads' owner
// label (the ACL labels). A role spelled like one of the labels the server gives (tenant:, user:,
// owner:) is left out: roles come from key files and identity providers that may let users name
// groups, and a role "tenant:acme" would read acme's documents from another tenant.
inline bool is_identity_label(const std::string& role) {
  for (const char* prefix : {"tenant:", "user:", retrieval::kOwnerLabelPrefix}) {
    if (role.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

inline retrieval::Reader reader_of(const Identity& identity) {
  retrieval::Reader reader;
  for (const std::string& role : identity.roles) {
    if (!is_identity_label(role)) reader.labels.push_back(role);
  }
  if (!identity.tenant.empty()) reader.labels.push_back("tenant:" + identity.tenant);
  if (!identity.user.empty()) reader.labels.push_back("user:" + identity.user);
  // The caller's own uploads; a credential that names no owner owns none.
  std::string owner = identity.owner();
  if (!owner.empty() || identity.tenant.empty())
    reader.labels.push_back(retrieval::owner_label({identity.tenant, owner}));
  return reader;
}

// The question retrieval searches for: query_rewrite's, else the newest user message (a
// completion's prompt).
inline std::string retrieval_query(const Request& request) {
  if (auto rewritten = request.attachment<std::string>(kRetrievalQuery)) return *rewritten;
  return request.kind == RequestKind::completion ? request.prompt : request.last_user_message();
}
}  // namespace chatflow
