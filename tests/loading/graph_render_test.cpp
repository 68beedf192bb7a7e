// Drawing a pipeline: every stage, port, resource and reference appears in DOT and Mermaid.
#include "framework/loading/graph_render.h"

#include <map>
#include <vector>

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

// A small well-formedness check: tags nest and close, attribute values are quoted, text and
// attributes hold no bare '<' and every '&' starts an entity. Returns "" or what is wrong, and
// counts each element name into `elements`.
std::string xml_problem(const std::string& xml, std::map<std::string, int>& elements) {
  std::vector<std::string> open;
  auto entity_ok = [&](size_t at) {
    for (const char* entity : {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"}) {
      if (xml.compare(at, std::string(entity).size(), entity) == 0) return true;
    }
    return false;
  };
  size_t i = 0;
  while (i < xml.size()) {
    if (xml[i] == '&' && !entity_ok(i)) return "a bare '&' at " + std::to_string(i);
    if (xml[i] != '<') {
      if (xml[i] == '>') return "a bare '>' in text at " + std::to_string(i);
      ++i;
      continue;
    }
    size_t end = i + 1;
    char quote = 0;
    for (; end < xml.size(); ++end) {
      if (quote) {
        if (xml[end] == quote)
          quote = 0;
        else if (xml[end] == '<')
          return "a '<' inside an attribute at " + std::to_string(end);
        else if (xml[end] == '&' && !entity_ok(end))
          return "a bare '&' in an attribute";
      } else if (xml[end] == '"' || xml[end] == '\'') {
        quote = xml[end];
      } else if (xml[end] == '<') {
        return "a '<' inside a tag at " + std::to_string(end);
      } else if (xml[end] == '>') {
        break;
      }
    }
    if (end == xml.size()) return "an unclosed tag at " + std::to_string(i);
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.front() == '/') {
      std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "</" + name + "> closes nothing open";
      open.pop_back();
      continue;
    }
    bool self_closing = tag.back() == '/';
    std::string name = tag.substr(0, tag.find_first_of(" /"));
    ++elements[name];
    if (!self_closing) open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  return "";
}

TEST(GraphRender, SvgIsWellFormedWithEveryStageItsTextsAndEveryEdge) {
  Registry registry = test_registry();
  PipelineSpec spec = branching_spec(registry);
  std::string svg = render_svg(spec);
  std::map<std::string, int> elements;
  ASSERT_EQ(xml_problem(svg, elements), "") << svg;
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u) << svg;
  EXPECT_EQ(elements["svg"], 1);
  EXPECT_EQ(elements["g"], 5) << "four stages and the sink";
  EXPECT_EQ(elements["rect"], 4);
  EXPECT_EQ(elements["path"], static_cast<int>(spec.connections.size()) + 1)
      << "each edge, and the arrowhead";
  for (const auto& stage : spec.stages) {
    EXPECT_NE(svg.find("<g class=\"stage\" data-stage=\"" + stage.name + "\" data-type=\"" +
                       stage.type->name + "\""),
              std::string::npos)
        << stage.name;
    EXPECT_NE(svg.find("<text class=\"stage-name\""), std::string::npos);
    EXPECT_NE(svg.find("<text class=\"stage-stats\" data-stage=\"" + stage.name + "\""),
              std::string::npos)
        << stage.name;
  }
  EXPECT_NE(svg.find("data-from=\"check\" data-to=\"tail\" data-port=\"hit\""), std::string::npos);
  EXPECT_NE(svg.find("data-from=\"tail\" data-to=\"sink\""), std::string::npos);
  EXPECT_NE(svg.find("<text class=\"edge-label\""), std::string::npos)
      << "a branch names its ports";
  EXPECT_NE(svg.find("data-kind=\"stream\""), std::string::npos);
}

TEST(GraphRender, SvgEscapesNamesFromTheFile) {
  Registry registry = test_registry();
  PipelineSpec spec = branching_spec(registry);
  spec.name = "a&b";
  spec.stages[1].name = "<x&\"y>";
  std::string svg = render_svg(spec);
  std::map<std::string, int> elements;
  EXPECT_EQ(xml_problem(svg, elements), "") << svg;
  EXPECT_EQ(svg.find("<x&"), std::string::npos) << svg;
  EXPECT_NE(svg.find("data-stage=\"&lt;x&amp;&quot;y&gt;\""), std::string::npos) << svg;
  EXPECT_NE(svg.find(">&lt;x&amp;&quot;y&gt;</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("<title>a&amp;b</title>"), std::string::npos) << svg;
}

// The y of a stage's box in the drawing.
double stage_top(const std::string& svg, const std::string& stage) {
  size_t group = svg.find("data-stage=\"" + stage + "\"");
  size_t y = svg.find(" y=\"", group);
  return std::stod(svg.substr(y + 4));
}
double stage_left(const std::string& svg, const std::string& stage) {
  size_t group = svg.find("data-stage=\"" + stage + "\"");
  size_t x = svg.find("<rect x=\"", group);
  return std::stod(svg.substr(x + 9));
}

TEST(GraphRender, LayersFollowTheLongestPathAndArmsSitSideBySide) {
  Diagnostics diagnostics;
  auto spec = check_yaml(R"(version: 1
name: ab
stages:
  - {name: split, type: ab_split, config: {arms: {left: 50, right: 50}}}
  - {name: one, type: echo}
  - {name: two, type: echo}
  - {name: shout, type: uppercase}
  - {name: emit, type: sse_emit}
edges: [split.left -> one, split.right -> two, one.out -> shout, two.out -> emit, shout.out -> emit]
)",
                         builtin_registry(), diagnostics);
  ASSERT_TRUE(spec) << diagnostics.to_string();
  EXPECT_EQ(stage_depths(*spec), (std::vector<size_t>{0, 1, 1, 2, 3}));
  EXPECT_EQ(stage_arms(*spec), (std::vector<std::string>{"", "left", "right", "left", ""}));
  std::string svg = render_svg(*spec);
  std::map<std::string, int> elements;
  ASSERT_EQ(xml_problem(svg, elements), "") << svg;
  EXPECT_EQ(stage_top(svg, "one"), stage_top(svg, "two"));
  EXPECT_NE(stage_left(svg, "one"), stage_left(svg, "two"));
  EXPECT_LT(stage_top(svg, "split"), stage_top(svg, "one"));
  EXPECT_LT(stage_top(svg, "shout"), stage_top(svg, "emit"));
  EXPECT_NE(
      svg.find("data-stage=\"one\" data-type=\"echo\" data-kind=\"request\" data-arm=\"left\""),
      std::string::npos)
      << svg;
}

}  // namespace
}  // namespace chatflow::testing
