// The members of Request that need the runtime behind it: its release (the sink's last word),
// cancellation through the pipeline, and the stage timings the pipeline recorded.
#include <cstdio>

#include "framework/api/request.h"
#include "framework/api/sink.h"
#include "framework/runtime/pipeline_core.h"

namespace chatflow {

Request::Request() = default;

Request::~Request() {
  // No other thread holds the request any more: every field is final and safe to read.
  for (auto& callback : release_callbacks_) {
    try {
      callback(*this);
    } catch (const std::exception& failure) {
      std::fprintf(stderr, "chatflow: a release callback of request '%s' failed: %s\n", id.c_str(),
                   failure.what());
    }
  }
  if (!sink) return;
  try {
    sink->on_released(*this);
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "chatflow: sink failed releasing request '%s': %s\n", id.c_str(),
                 failure.what());
  }
}

void Request::cancel(std::optional<RequestError> why) {
  RequestError error =
      why ? std::move(*why)
          : RequestError{499, "request_cancelled", "the request was cancelled", "cancelled", {}};
  if (!runtime_) {
    // Not submitted yet: the first stage sees the flag and finishes the request.
    cancel_error_ = std::move(error);
    cancelled_.store(true, std::memory_order_release);
    return;
  }
  detail::PipelineCore::cancel(*this, std::move(error));
}

std::vector<StageTiming> Request::stage_timings() const {
  std::vector<StageTiming> timings;
  if (!runtime_) return timings;
  for (size_t i = 0; i < runtime_->stage_count; ++i)
    timings.push_back(runtime_->timings[i].snapshot());
  return timings;
}

}  // namespace chatflow
