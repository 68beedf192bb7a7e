#include "pipeline_helpers.h"

#include <gtest/gtest.h>

namespace chatflow::testing {

std::optional<PipelineSpec> check_yaml(const std::string& yaml, const Registry& registry,
                                       Diagnostics& diagnostics, const std::string& file) {
  return parse_pipeline_yaml(yaml, file, registry, diagnostics);
}

std::unique_ptr<Pipeline> build_yaml(const std::string& yaml, const Registry& registry) {
  Diagnostics diagnostics;
  auto spec = check_yaml(yaml, registry, diagnostics);
  std::unique_ptr<Pipeline> pipeline;
  if (spec) pipeline = Pipeline::build(std::move(*spec), diagnostics);
  EXPECT_TRUE(pipeline) << diagnostics.to_string();
  return pipeline;
}

std::shared_ptr<Request> user_request(const std::string& text,
                                      std::shared_ptr<CollectingSink>& sink) {
  auto request = std::make_shared<Request>();
  request->messages.push_back({"user", text});
  sink = std::make_shared<CollectingSink>();
  request->sink = sink;
  return request;
}

std::string run_text(Pipeline& pipeline, const std::string& text, std::shared_ptr<Request>* out) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request(text, sink);
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  if (out) *out = request;
  return sink->text();
}

std::string all_errors(const Diagnostics& diagnostics) {
  return diagnostics.to_string();
}

}  // namespace chatflow::testing
