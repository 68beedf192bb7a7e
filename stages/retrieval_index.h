// The `retrieval_index` resource: a directory built by `chatflow index` (or, with `source`,
// built and brought up to date from those files at start). When `chatflow index` updates the
// directory while serving, the next request after the manifest changes sees the new revision.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>

#include "framework/api/request.h"
#include "framework/api/resource.h"
#include "framework/retrieval/hybrid.h"
#include "framework/retrieval/retrieval_index.h"

namespace chatflow {

class RetrievalIndexResource final : public Resource {
 public:
  RetrievalIndexResource(std::string directory,
                         std::shared_ptr<const embedding::Embedder> embedder);

  // The newest revision on disk (checked at most once a second).
  std::shared_ptr<const retrieval::RetrievalIndex> current() const;

 private:
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

// Who reads the index for a caller: its roles, "tenant:<t>" and "user:<u>" (the ACL labels).
inline retrieval::Reader reader_of(const Identity& identity) {
  retrieval::Reader reader;
  reader.labels = identity.roles;
  if (!identity.tenant.empty()) reader.labels.push_back("tenant:" + identity.tenant);
  if (!identity.user.empty()) reader.labels.push_back("user:" + identity.user);
  return reader;
}

// The question retrieval searches for: query_rewrite's, else the newest user message (a
// completion's prompt).
inline std::string retrieval_query(const Request& request) {
  if (auto rewritten = request.attachment<std::string>(kRetrievalQuery)) return *rewritten;
  return request.kind == RequestKind::completion ? request.prompt : request.last_user_message();
}
}  // namespace chatflow
