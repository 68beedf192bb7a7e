#include "framework/loading/graph_render.h"

namespace chatflow {
namespace {

std::string escape_dot(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return escaped;
}

std::string escape_mermaid(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"') {
      escaped += "#quot;";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

PortKind port_kind(const PipelineSpec& spec, const Connection& connection) {
  return spec.stages[connection.from_stage].type->ports[connection.from_port].kind;
}

const std::string& port_name(const PipelineSpec& spec, const Connection& connection) {
  return spec.stages[connection.from_stage].type->ports[connection.from_port].name;
}

}  // namespace

std::string render_dot(const PipelineSpec& spec) {
  std::string dot = "digraph \"" + escape_dot(spec.name) + "\" {\n";
  dot += "  rankdir=LR;\n";
  dot +=
      "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", "
      "fillcolor=\"#e8f0fe\"];\n";
  dot += "  edge [fontname=\"Helvetica\", fontsize=10];\n";
  for (size_t i = 0; i < spec.stages.size(); ++i) {
    const auto& stage = spec.stages[i];
    bool stream = stage.type->kind == StageKind::stream;
    dot += "  s" + std::to_string(i) + " [label=\"" + escape_dot(stage.name) + "\\n" +
           escape_dot(stage.type->name) + "\"" + (stream ? ", fillcolor=\"#fef7e0\"" : "") + "];\n";
  }
  dot += "  sink [label=\"sink\", shape=doublecircle, fillcolor=\"#e6f4ea\"];\n";
  for (size_t i = 0; i < spec.resources.size(); ++i) {
    const auto& resource = spec.resources[i];
    dot += "  r" + std::to_string(i) + " [label=\"" + escape_dot(resource.name) + "\\n" +
           escape_dot(resource.type->name) + "\", shape=cylinder, fillcolor=\"#f1f3f4\"];\n";
  }
  for (const auto& connection : spec.connections) {
    std::string target =
        connection.to_stage == kSinkStage ? "sink" : "s" + std::to_string(connection.to_stage);
    bool stream = port_kind(spec, connection) == PortKind::stream;
    dot += "  s" + std::to_string(connection.from_stage) + " -> " + target + " [label=\"" +
           escape_dot(port_name(spec, connection)) + "\"" + (stream ? ", penwidth=2.5" : "") +
           "];\n";
  }
  auto reference_edges = [&](const std::vector<ResourceReference>& references,
                             const std::string& user) {
    for (const auto& reference : references) {
      for (size_t r = 0; r < spec.resources.size(); ++r) {
        if (spec.resources[r].name != reference.resource_name) continue;
        dot += "  r" + std::to_string(r) + " -> " + user +
               " [style=dashed, arrowhead=none, label=\"" + escape_dot(reference.key) + "\"];\n";
      }
    }
  };
  for (size_t i = 0; i < spec.stages.size(); ++i)
    reference_edges(spec.stages[i].references, "s" + std::to_string(i));
  for (size_t i = 0; i < spec.resources.size(); ++i) {
    reference_edges(spec.resources[i].references, "r" + std::to_string(i));
  }
  dot += "}\n";
  return dot;
}

std::string render_mermaid(const PipelineSpec& spec) {
  std::string text = "flowchart LR\n";
  for (size_t i = 0; i < spec.stages.size(); ++i) {
    const auto& stage = spec.stages[i];
    text += "  s" + std::to_string(i) + "[\"" + escape_mermaid(stage.name) + "<br/><i>" +
            escape_mermaid(stage.type->name) + "</i>\"]\n";
  }
  text += "  sink((\"sink\"))\n";
  for (size_t i = 0; i < spec.resources.size(); ++i) {
    const auto& resource = spec.resources[i];
    text += "  r" + std::to_string(i) + "[(\"" + escape_mermaid(resource.name) + "<br/><i>" +
            escape_mermaid(resource.type->name) + "</i>\")]\n";
  }
  for (const auto& connection : spec.connections) {
    std::string target =
        connection.to_stage == kSinkStage ? "sink" : "s" + std::to_string(connection.to_stage);
    std::string arrow = port_kind(spec, connection) == PortKind::stream ? " ==>" : " -->";
    text += "  s" + std::to_string(connection.from_stage) + arrow + "|" +
            escape_mermaid(port_name(spec, connection)) + "| " + target + "\n";
  }
  auto reference_edges = [&](const std::vector<ResourceReference>& references,
                             const std::string& user) {
    for (const auto& reference : references) {
      for (size_t r = 0; r < spec.resources.size(); ++r) {
        if (spec.resources[r].name != reference.resource_name) continue;
        text += "  r" + std::to_string(r) + " -.-|" + escape_mermaid(reference.key) + "| " + user +
                "\n";
      }
    }
  };
  for (size_t i = 0; i < spec.stages.size(); ++i)
    reference_edges(spec.stages[i].references, "s" + std::to_string(i));
  for (size_t i = 0; i < spec.resources.size(); ++i) {
    reference_edges(spec.resources[i].references, "r" + std::to_string(i));
  }
  text += "  classDef stream fill:#fef7e0;\n";
  for (size_t i = 0; i < spec.stages.size(); ++i) {
    if (spec.stages[i].type->kind == StageKind::stream)
      text += "  class s" + std::to_string(i) + " stream\n";
  }
  return text;
}

}  // namespace chatflow
