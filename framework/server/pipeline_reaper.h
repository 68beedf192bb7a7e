// Where replaced pipelines are destroyed: on a thread of the reaper's own, whoever lets go of the
// last reference. After a reload that is often an I/O thread (a connection routed with the old
// snapshot finishing after the old pipeline drained), sometimes one of the pipeline's own threads
// (a moderation runner ending the last request). Tearing a pipeline down joins threads
// (moderation runners, a JWKS refresher, retention sweeps) and may take seconds: on an I/O thread
// every connection it serves would wait, and a thread of the pipeline cannot join itself.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "framework/server/served_pipeline.h"

namespace chatflow::server {

class PipelineReaper {
 public:
  PipelineReaper() = default;
  // Destroys what was handed over and not yet destroyed, then ends its thread.
  ~PipelineReaper();
  PipelineReaper(const PipelineReaper&) = delete;
  PipelineReaper& operator=(const PipelineReaper&) = delete;

  // `served` shared: its last owner, on whatever thread, hands it to `reaper` to destroy.
  static std::shared_ptr<const ServedPipeline> adopt(std::unique_ptr<ServedPipeline> served,
                                                     std::shared_ptr<PipelineReaper> reaper);

  // Returns once everything handed over so far is destroyed.
  void wait_until_idle();

 private:
  void dispose(ServedPipeline* served);
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<ServedPipeline*> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;  // started by the first hand-over
};

}  // namespace chatflow::server
