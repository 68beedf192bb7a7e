// Drawing a pipeline: every stage, port, resource and reference appears in DOT and Mermaid.
#include "framework/loading/graph_render.h"

#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"
#include "support/test_stages.h"

namespace chatflow::testing {
namespace {

PipelineSpec branching_spec(const Registry& registry) {
  Diagnostics diagnostics;
  auto spec = check_yaml(R"(version: 1
name: drawn
resources:
  db: {type: store, path: /tmp/db}
stages:
  - {name: check, type: branch}
  - {name: use, type: use_store, config: {store: db}}
  - {name: gen, type: generate}
  - {name: tail, type: append, config: {suffix: x}}
edges:
  - check.hit -> tail
)",
                         registry, diagnostics);
  EXPECT_TRUE(spec) << diagnostics.to_string();
  return std::move(*spec);
}

TEST(GraphRender, DotHasStagesPortsResourcesAndTheSink) {
  Registry registry = test_registry();
  std::string dot = render_dot(branching_spec(registry));
  EXPECT_EQ(dot.rfind("digraph \"drawn\" {", 0), 0u);
  EXPECT_NE(dot.find("s0 [label=\"check\\nbranch\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("s0 -> s3 [label=\"hit\", penwidth=2.5]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("s0 -> s1 [label=\"miss\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("s3 -> sink [label=\"out\", penwidth=2.5]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("r0 [label=\"db\\nstore\", shape=cylinder"), std::string::npos) << dot;
  EXPECT_NE(dot.find("r0 -> s1 [style=dashed, arrowhead=none, label=\"store\"]"), std::string::npos)
      << dot;
  EXPECT_EQ(dot.back(), '\n');
}

TEST(GraphRender, MermaidHasTheSameGraph) {
  Registry registry = test_registry();
  std::string mermaid = render_mermaid(branching_spec(registry));
  EXPECT_EQ(mermaid.rfind("flowchart LR\n", 0), 0u);
  EXPECT_NE(mermaid.find("s0 ==>|hit| s3"), std::string::npos) << mermaid;
  EXPECT_NE(mermaid.find("s0 -->|miss| s1"), std::string::npos) << mermaid;
  EXPECT_NE(mermaid.find("s3 ==>|out| sink"), std::string::npos) << mermaid;
  EXPECT_NE(mermaid.find("r0 -.-|store| s1"), std::string::npos) << mermaid;
  EXPECT_NE(mermaid.find("class s3 stream"), std::string::npos) << mermaid;
}

}  // namespace
}  // namespace chatflow::testing
