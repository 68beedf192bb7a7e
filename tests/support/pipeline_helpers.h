// Building pipelines from YAML text inside tests.
#pragma once

#include <memory>
#include <string>

#include "collecting_sink.h"
#include "framework/runtime/pipeline.h"

namespace chatflow::testing {

// Checks `yaml` (as if read from `file`) against `registry`; errors land in `diagnostics`.
std::optional<PipelineSpec> check_yaml(const std::string& yaml, const Registry& registry,
                                       Diagnostics& diagnostics,
                                       const std::string& file = "test.yaml");

// Checks and builds; fails the current test (and returns nullptr) on any error.
std::unique_ptr<Pipeline> build_yaml(const std::string& yaml, const Registry& registry);

// A request with one user message and a collecting sink.
std::shared_ptr<Request> user_request(const std::string& text,
                                      std::shared_ptr<CollectingSink>& sink);

// Submits a one-message request, waits for it, and returns the text the sink collected; the
// request itself goes to `out` when given.
std::string run_text(Pipeline& pipeline, const std::string& text,
                     std::shared_ptr<Request>* out = nullptr);

// The messages of all errors, one per line, for readable assertion failures.
std::string all_errors(const Diagnostics& diagnostics);

}  // namespace chatflow::testing
