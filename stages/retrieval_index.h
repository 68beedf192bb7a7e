// The `retrieval_index` resource: a directory built by `chatflow index` (or, with `source`,
// built and brought up to date from those files at start). When `chatflow index` updates the
// directory while serving, the next request after the manifest changes sees the new revision.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>

#include "framework/resource.h"
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
}  // namespace chatflow
