#include "framework/loading/graph_render.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <string_view>

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

// --- The layered drawing (SVG). ---

namespace {

// Text and attribute values alike; a control character XML 1.0 cannot hold becomes U+FFFD.
std::string escape_xml(std::string_view text) {
  std::string escaped;
  for (char c : text) {
    switch (c) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      case '"':
        escaped += "&quot;";
        break;
      case '\'':
        escaped += "&#39;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          escaped += "\xEF\xBF\xBD";
        } else {
          escaped += c;
        }
    }
  }
  return escaped;
}

// Stages by index, the sink as index stages.size().
size_t target_node(const PipelineSpec& spec, const Connection& connection) {
  return connection.to_stage == kSinkStage ? spec.stages.size() : connection.to_stage;
}

// The longest path from a stage without inputs to each stage, and the sink one layer below all.
std::vector<size_t> node_depths(const PipelineSpec& spec) {
  size_t nodes = spec.stages.size() + 1;
  std::vector<std::vector<size_t>> targets(nodes);
  std::vector<size_t> inputs(nodes, 0);
  for (const auto& connection : spec.connections) {
    size_t target = target_node(spec, connection);
    targets[connection.from_stage].push_back(target);
    ++inputs[target];
  }
  std::vector<size_t> depth(nodes, 0);
  std::vector<bool> placed(nodes, false);
  std::deque<size_t> ready;
  for (size_t node = 0; node < nodes; ++node) {
    if (inputs[node] == 0) ready.push_back(node);
  }
  for (size_t done = 0; done < nodes; ++done) {
    if (ready.empty()) {
      // A cycle (the graph check refuses them): drawn anyway, from its first stage.
      size_t first = std::find(placed.begin(), placed.end(), false) - placed.begin();
      inputs[first] = 0;
      ready.push_back(first);
    }
    size_t node = ready.front();
    ready.pop_front();
    placed[node] = true;
    for (size_t target : targets[node]) {
      if (placed[target]) continue;
      depth[target] = std::max(depth[target], depth[node] + 1);
      if (inputs[target] > 0 && --inputs[target] == 0) ready.push_back(target);
    }
  }
  size_t deepest = 0;
  for (size_t stage = 0; stage + 1 < nodes; ++stage)
    deepest = std::max(deepest, depth[stage]);
  depth.back() = deepest + 1;
  return depth;
}

std::string number(double value) {
  return std::to_string(static_cast<long long>(std::lround(value)));
}

struct Point {
  double x = 0;
  double y = 0;
};

// One box of the drawing: a stage, the sink, or a point a long edge passes through.
struct Box {
  enum class Kind { stage, sink, bend } kind = Kind::stage;
  size_t stage = 0;
  size_t layer = 0;
  double width = 0;
  double left = 0;
  double top = 0;
  double height = 0;
  double center() const { return left + width / 2; }
};

// An edge as the boxes it passes, source first.
struct Path {
  const Connection* connection = nullptr;
  std::vector<size_t> boxes;
};

constexpr double kMargin = 24;
constexpr double kStageHeight = 64;
constexpr double kLayerGap = 44;
constexpr double kBoxGap = 28;
constexpr double kSinkWidth = 90;
constexpr double kSinkHeight = 36;
constexpr double kBendWidth = 14;

double layer_top(size_t layer) {
  return kMargin + static_cast<double>(layer) * (kStageHeight + kLayerGap);
}

// Orders each layer's boxes by where the boxes feeding them sit in the layer above, so edges
// cross less; then places the layers centred under one another.
void place(std::vector<Box>& boxes, const std::vector<Path>& paths, size_t layers, double& width) {
  std::vector<std::vector<size_t>> rows(layers);
  for (size_t i = 0; i < boxes.size(); ++i)
    rows[boxes[i].layer].push_back(i);
  std::vector<double> slot(boxes.size(), 0);
  for (size_t layer = 0; layer < layers; ++layer) {
    std::vector<double> key(boxes.size(), 0);
    std::vector<int> feeders(boxes.size(), 0);
    for (const Path& path : paths) {
      for (size_t i = 1; i < path.boxes.size(); ++i) {
        size_t from = path.boxes[i - 1];
        size_t to = path.boxes[i];
        if (boxes[to].layer != layer || boxes[from].layer + 1 != layer) continue;
        key[to] += slot[from];
        ++feeders[to];
      }
    }
    auto& row = rows[layer];
    for (size_t position = 0; position < row.size(); ++position) {
      size_t box = row[position];
      key[box] = feeders[box] > 0 ? key[box] / feeders[box] : static_cast<double>(position);
    }
    std::stable_sort(row.begin(), row.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
    for (size_t position = 0; position < row.size(); ++position)
      slot[row[position]] = static_cast<double>(position);
  }
  std::vector<double> row_width(layers, 0);
  width = 0;
  for (size_t layer = 0; layer < layers; ++layer) {
    for (size_t box : rows[layer])
      row_width[layer] += boxes[box].width;
    if (rows[layer].size() > 1)
      row_width[layer] += kBoxGap * static_cast<double>(rows[layer].size() - 1);
    width = std::max(width, row_width[layer]);
  }
  for (size_t layer = 0; layer < layers; ++layer) {
    double x = kMargin + (width - row_width[layer]) / 2;
    for (size_t index : rows[layer]) {
      Box& box = boxes[index];
      box.left = x;
      x += box.width + kBoxGap;
      double top = layer_top(layer);
      box.height = box.kind == Box::Kind::sink ? kSinkHeight : kStageHeight;
      box.top = box.kind == Box::Kind::sink ? top + (kStageHeight - kSinkHeight) / 2 : top;
    }
  }
  width += 2 * kMargin;
}

// Where each edge leaves its source and enters its target: spread over the box's bottom and
// top edges, in the order of where the edges go, so they do not cross at the box.
std::vector<std::pair<Point, Point>> edge_ends(const std::vector<Box>& boxes,
                                               const std::vector<Path>& paths) {
  std::vector<std::pair<Point, Point>> ends(paths.size());
  std::vector<std::vector<size_t>> leaving(boxes.size());
  std::vector<std::vector<size_t>> entering(boxes.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    leaving[paths[i].boxes.front()].push_back(i);
    entering[paths[i].boxes.back()].push_back(i);
  }
  auto spread = [&](std::vector<size_t>& edges, const Box& box, bool bottom) {
    std::stable_sort(edges.begin(), edges.end(), [&](size_t a, size_t b) {
      const auto& pa = paths[a].boxes;
      const auto& pb = paths[b].boxes;
      size_t na = bottom ? pa[1] : pa[pa.size() - 2];
      size_t nb = bottom ? pb[1] : pb[pb.size() - 2];
      return boxes[na].center() < boxes[nb].center();
    });
    for (size_t k = 0; k < edges.size(); ++k) {
      Point point{
          box.left + box.width * static_cast<double>(k + 1) / static_cast<double>(edges.size() + 1),
          bottom ? box.top + box.height : box.top};
      (bottom ? ends[edges[k]].first : ends[edges[k]].second) = point;
    }
  };
  for (size_t box = 0; box < boxes.size(); ++box) {
    if (boxes[box].kind == Box::Kind::bend) continue;
    spread(leaving[box], boxes[box], true);
    spread(entering[box], boxes[box], false);
  }
  return ends;
}

// An SVG path through the bends: smooth curves between layers, straight down through a bend.
std::string path_data(const std::vector<Box>& boxes, const Path& path, Point start, Point end) {
  std::vector<Point> points{start};
  for (size_t i = 1; i + 1 < path.boxes.size(); ++i) {
    const Box& bend = boxes[path.boxes[i]];
    points.push_back({bend.center(), bend.top});
    points.push_back({bend.center(), bend.top + bend.height});
  }
  points.push_back(end);
  std::string d = "M" + number(points[0].x) + "," + number(points[0].y);
  for (size_t i = 1; i < points.size(); ++i) {
    Point from = points[i - 1];
    Point to = points[i];
    bool through_bend = i % 2 == 0;  // from a bend's top to its bottom
    if (through_bend) {
      d += " L" + number(to.x) + "," + number(to.y);
      continue;
    }
    double bow = std::max(12.0, std::abs(to.y - from.y) / 2);
    d += " C" + number(from.x) + "," + number(from.y + bow) + " " + number(to.x) + "," +
         number(to.y - bow) + " " + number(to.x) + "," + number(to.y);
  }
  return d;
}

constexpr std::string_view kSvgStyle =
    ".pipeline-graph .stage rect{fill:#e8f0fe;stroke:#5f6368;stroke-width:1}"
    ".pipeline-graph .stage[data-kind=stream] rect{fill:#fef7e0}"
    ".pipeline-graph .stage-name{font:600 13px sans-serif;fill:#202124}"
    ".pipeline-graph .stage-type{font:12px sans-serif;fill:#5f6368}"
    ".pipeline-graph .stage-stats{font:11px monospace;fill:#188038}"
    ".pipeline-graph .edge{fill:none;stroke:#80868b;stroke-width:1.5}"
    ".pipeline-graph .edge.stream{stroke-width:2.5}"
    ".pipeline-graph .edge-label{font:11px sans-serif;fill:#5f6368}"
    ".pipeline-graph .sink ellipse{fill:#e6f4ea;stroke:#5f6368}"
    ".pipeline-graph .sink text{font:12px sans-serif;fill:#202124}";

}  // namespace

std::vector<size_t> stage_depths(const PipelineSpec& spec) {
  std::vector<size_t> depths = node_depths(spec);
  depths.pop_back();
  return depths;
}

std::vector<std::string> stage_arms(const PipelineSpec& spec) {
  size_t stages = spec.stages.size();
  std::vector<std::vector<size_t>> targets(stages);
  for (const auto& connection : spec.connections) {
    if (connection.to_stage != kSinkStage)
      targets[connection.from_stage].push_back(connection.to_stage);
  }
  std::vector<std::string> arms(stages);
  for (size_t split = 0; split < stages; ++split) {
    const auto& type = *spec.stages[split].type;
    if (type.name != "ab_split") continue;
    // reached[port][stage]: the stage can be reached from the arm's first stage.
    std::vector<std::vector<bool>> reached(type.ports.size(), std::vector<bool>(stages, false));
    for (const auto& connection : spec.connections) {
      if (connection.from_stage != split || connection.to_stage == kSinkStage) continue;
      auto& seen = reached[connection.from_port];
      std::vector<size_t> next{connection.to_stage};
      while (!next.empty()) {
        size_t stage = next.back();
        next.pop_back();
        if (seen[stage]) continue;
        seen[stage] = true;
        for (size_t target : targets[stage])
          next.push_back(target);
      }
    }
    for (size_t stage = 0; stage < stages; ++stage) {
      int only = -1;
      int count = 0;
      for (size_t port = 0; port < reached.size(); ++port) {
        if (!reached[port][stage]) continue;
        only = static_cast<int>(port);
        ++count;
      }
      if (count == 1) arms[stage] = type.ports[static_cast<size_t>(only)].name;
    }
  }
  return arms;
}

std::string render_svg(const PipelineSpec& spec) {
  size_t stages = spec.stages.size();
  std::vector<size_t> depth = node_depths(spec);
  std::vector<std::string> arms = stage_arms(spec);
  size_t longest = 0;
  for (const auto& stage : spec.stages)
    longest = std::max({longest, stage.name.size(), stage.type->name.size()});
  double stage_width = std::clamp(7.5 * static_cast<double>(longest) + 28, 120.0, 320.0);

  std::vector<Box> boxes;
  for (size_t i = 0; i < stages; ++i)
    boxes.push_back({Box::Kind::stage, i, depth[i], stage_width});
  boxes.push_back({Box::Kind::sink, stages, depth[stages], kSinkWidth});
  std::vector<Path> paths;
  for (const auto& connection : spec.connections) {
    Path path{&connection, {connection.from_stage}};
    size_t target = target_node(spec, connection);
    for (size_t layer = depth[connection.from_stage] + 1; layer < depth[target]; ++layer) {
      boxes.push_back({Box::Kind::bend, 0, layer, kBendWidth});
      path.boxes.push_back(boxes.size() - 1);
    }
    path.boxes.push_back(target);
    paths.push_back(std::move(path));
  }
  double width = 0;
  size_t layers = depth[stages] + 1;
  place(boxes, paths, layers, width);
  double height = layer_top(layers - 1) + kStageHeight + kMargin;
  auto ends = edge_ends(boxes, paths);

  std::string name = escape_xml(spec.name);
  std::string svg =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"pipeline-graph\" "
      "data-pipeline=\"" +
      name + "\" width=\"" + number(width) + "\" height=\"" + number(height) + "\" viewBox=\"0 0 " +
      number(width) + " " + number(height) + "\" role=\"img\" aria-label=\"pipeline " + name +
      "\">\n";
  svg += "<title>" + name + "</title>\n<style>" + std::string(kSvgStyle) + "</style>\n";
  svg +=
      "<defs><marker id=\"chatflow-arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" "
      "markerUnits=\"userSpaceOnUse\" markerWidth=\"9\" markerHeight=\"9\" orient=\"auto\"><path "
      "d=\"M0,0 L10,5 L0,10 z\" "
      "fill=\"#80868b\"/></marker></defs>\n";
  std::vector<size_t> connected_ports(stages, 0);
  for (const auto& connection : spec.connections)
    ++connected_ports[connection.from_stage];
  for (size_t i = 0; i < paths.size(); ++i) {
    const Connection& connection = *paths[i].connection;
    bool stream = port_kind(spec, connection) == PortKind::stream;
    std::string target = connection.to_stage == kSinkStage
                             ? std::string("sink")
                             : escape_xml(spec.stages[connection.to_stage].name);
    std::string port = escape_xml(port_name(spec, connection));
    svg += "<path class=\"edge" + std::string(stream ? " stream" : "") + "\" data-from=\"" +
           escape_xml(spec.stages[connection.from_stage].name) + "\" data-to=\"" + target +
           "\" data-port=\"" + port + "\" d=\"" +
           path_data(boxes, paths[i], ends[i].first, ends[i].second) +
           "\" marker-end=\"url(#chatflow-arrow)\"/>\n";
    // Only a branch says which port an edge leaves by.
    if (connected_ports[connection.from_stage] > 1) {
      svg += "<text class=\"edge-label\" x=\"" + number(ends[i].first.x + 4) + "\" y=\"" +
             number(ends[i].first.y + 13) + "\">" + port + "</text>\n";
    }
  }
  for (const Box& box : boxes) {
    if (box.kind == Box::Kind::sink) {
      svg += "<g class=\"sink\"><ellipse cx=\"" + number(box.center()) + "\" cy=\"" +
             number(box.top + box.height / 2) + "\" rx=\"" + number(box.width / 2) + "\" ry=\"" +
             number(box.height / 2) + "\"/><text x=\"" + number(box.center()) + "\" y=\"" +
             number(box.top + box.height / 2 + 4) + "\" text-anchor=\"middle\">sink</text></g>\n";
    }
    if (box.kind != Box::Kind::stage) continue;
    const StageSpec& stage = spec.stages[box.stage];
    std::string stage_name = escape_xml(stage.name);
    std::string x = number(box.center());
    svg += "<g class=\"stage\" data-stage=\"" + stage_name + "\" data-type=\"" +
           escape_xml(stage.type->name) + "\" data-kind=\"" +
           (stage.type->kind == StageKind::stream ? "stream" : "request") + "\"" +
           (arms[box.stage].empty() ? "" : " data-arm=\"" + escape_xml(arms[box.stage]) + "\"") +
           ">";
    svg += "<rect x=\"" + number(box.left) + "\" y=\"" + number(box.top) + "\" width=\"" +
           number(box.width) + "\" height=\"" + number(box.height) + "\" rx=\"8\"/>";
    svg += "<text class=\"stage-name\" x=\"" + x + "\" y=\"" + number(box.top + 21) +
           "\" text-anchor=\"middle\">" + stage_name + "</text>";
    svg += "<text class=\"stage-type\" x=\"" + x + "\" y=\"" + number(box.top + 38) +
           "\" text-anchor=\"middle\">" + escape_xml(stage.type->name) + "</text>";
    svg += "<text class=\"stage-stats\" data-stage=\"" + stage_name + "\" x=\"" + x + "\" y=\"" +
           number(box.top + 55) + "\" text-anchor=\"middle\"></text></g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace chatflow
