#include "framework/loading/pipeline_graph_check.h"

#include <algorithm>
#include <functional>
#include <map>

#include "framework/api/suggest.h"

namespace chatflow {
namespace {

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t");
  return std::string(text.substr(begin, end - begin + 1));
}

// Whether a resource of `type` may be named where a key asks for `wanted`: one type, or several
// joined by " or " ("gguf_model or upstream").
bool accepts_resource_type(std::string_view wanted, std::string_view type) {
  constexpr std::string_view separator = " or ";
  for (size_t start = 0;;) {
    size_t end = wanted.find(separator, start);
    if (wanted.substr(start, end == std::string_view::npos ? end : end - start) == type)
      return true;
    if (end == std::string_view::npos) return false;
    start = end + separator.size();
  }
}

// The location of the character at `offset` inside a one-line scalar, so an error points at the
// stage or port name rather than the start of the edge.
SourceLocation inside(const ConfigValue& scalar, size_t offset) {
  SourceLocation where = scalar.where;
  if (where.line > 0) where.column += static_cast<int>(offset) + (scalar.quoted ? 1 : 0);
  return where;
}

class GraphChecker {
 public:
  GraphChecker(PipelineSpec& spec, Diagnostics& diagnostics)
      : spec_(spec), diagnostics_(diagnostics) {
    for (const auto& stage : spec_.stages)
      stage_names_.push_back(stage.name);
  }

  void run(const ConfigValue* edges) {
    read_edges(edges);
    add_list_order_connections();
    check_port_kinds();
    check_unconnected_ports();
    check_entry();
    if (!diagnostics_.empty()) return;
    check_cycles();
    check_reachability();
    check_resource_references();
  }

 private:
  std::string port_label(size_t stage, PortId port) const {
    return spec_.stages[stage].name + "." + spec_.stages[stage].type->ports[port].name;
  }

  std::string stage_label(size_t stage) const {
    return "stage '" + spec_.stages[stage].name + "' (" + spec_.stages[stage].type->name + ")";
  }

  void read_edges(const ConfigValue* edges) {
    if (edges == nullptr || edges->is_null()) return;
    if (!edges->is_sequence()) {
      diagnostics_.error(edges->where, "'edges' must be a list of 'stage.port -> stage', got " +
                                           edges->describe());
      return;
    }
    for (const auto& edge : edges->items)
      read_edge(edge);
  }

  void read_edge(const ConfigValue& edge) {
    if (!edge.is_scalar()) {
      diagnostics_.error(edge.where,
                         "an edge must be written 'stage.port -> stage', got " + edge.describe());
      return;
    }
    const std::string& text = edge.text;
    size_t arrow = text.find("->");
    if (arrow == std::string::npos || text.find("->", arrow + 2) != std::string::npos) {
      diagnostics_.error(edge.where,
                         "malformed edge '" + text + "': expected 'stage.port -> stage'");
      return;
    }
    std::string source = trim(std::string_view(text).substr(0, arrow));
    std::string target = trim(std::string_view(text).substr(arrow + 2));
    size_t source_offset = text.find_first_not_of(" \t");
    size_t target_offset = text.find_first_not_of(" \t", arrow + 2);
    if (source.empty() || target.empty()) {
      diagnostics_.error(edge.where,
                         "malformed edge '" + text + "': expected 'stage.port -> stage'");
      return;
    }
    std::string source_stage = source;
    std::string source_port;
    if (size_t dot = source.find('.'); dot != std::string::npos) {
      source_stage = source.substr(0, dot);
      source_port = source.substr(dot + 1);
    }
    auto from = find_stage(source_stage, inside(edge, source_offset));
    size_t to = kSinkStage;
    if (target != "sink") {
      auto found = find_stage(target, inside(edge, target_offset));
      if (!found) return;
      to = *found;
    }
    if (!from) return;
    const StageTypeInfo& type = *spec_.stages[*from].type;
    int port = source_port.empty() ? type.default_port : type.find_port(source_port);
    if (port < 0) {
      SourceLocation where = inside(edge, source_offset + source_stage.size() + 1);
      if (source_port.empty()) {
        diagnostics_.error(inside(edge, source_offset),
                           stage_label(*from) +
                               " has no default port; name one: " + join_names(type.port_names()));
      } else {
        diagnostics_.error(where, stage_label(*from) + " has no port '" + source_port + "'" +
                                      did_you_mean(source_port, type.port_names()) +
                                      " (its ports: " + join_names(type.port_names()) + ")");
      }
      return;
    }
    if (const Connection* existing = spec_.connection_from(*from, static_cast<PortId>(port))) {
      diagnostics_.error(edge.where,
                         "port '" + port_label(*from, port) + "' is already connected (at " +
                             existing->where.to_string() + "); a port feeds exactly one stage");
      return;
    }
    spec_.connections.push_back({*from, static_cast<PortId>(port), to, true, edge.where});
  }

  std::optional<size_t> find_stage(const std::string& name, const SourceLocation& where) {
    if (auto index = spec_.stage_index(name)) return index;
    diagnostics_.error(where, "edge names unknown stage '" + name + "'" +
                                  did_you_mean(name, stage_names_) +
                                  " (stages: " + join_names(stage_names_) + ")");
    return std::nullopt;
  }

  // Without an edge, a stage's default port feeds the next stage in the list, and the last
  // stage's default stream port feeds the sink.
  void add_list_order_connections() {
    for (size_t i = 0; i < spec_.stages.size(); ++i) {
      int port = spec_.stages[i].type->default_port;
      if (port < 0 || spec_.connection_from(i, static_cast<PortId>(port))) continue;
      bool last = i + 1 == spec_.stages.size();
      if (last && spec_.stages[i].type->ports[port].kind != PortKind::stream) continue;
      spec_.connections.push_back(
          {i, static_cast<PortId>(port), last ? kSinkStage : i + 1, false, spec_.stages[i].where});
    }
  }

  void check_port_kinds() {
    for (const auto& connection : spec_.connections) {
      PortKind kind = spec_.stages[connection.from_stage].type->ports[connection.from_port].kind;
      std::string how = connection.declared ? "by the edge" : "by list order";
      if (connection.to_stage == kSinkStage) {
        if (kind != PortKind::stream) {
          diagnostics_.error(connection.where,
                             "request port '" +
                                 port_label(connection.from_stage, connection.from_port) +
                                 "' cannot end at the sink: only a response stream can");
        }
        continue;
      }
      StageKind target = spec_.stages[connection.to_stage].type->kind;
      if (kind == PortKind::request && target == StageKind::stream) {
        diagnostics_.error(
            connection.where,
            stage_label(connection.to_stage) +
                " is a stream stage placed before the stream "
                "starts: it would receive requests from '" +
                port_label(connection.from_stage, connection.from_port) + "' (" + how +
                "); place it after the stage that generates the response (e.g. decode)");
      } else if (kind == PortKind::stream && target == StageKind::request) {
        diagnostics_.error(connection.where,
                           stage_label(connection.to_stage) +
                               " is a request stage placed after the stream "
                               "started: it would receive the chunks of '" +
                               port_label(connection.from_stage, connection.from_port) + "' (" +
                               how +
                               "); request stages go before the stage that generates the response");
      }
    }
  }

  void check_unconnected_ports() {
    for (size_t i = 0; i < spec_.stages.size(); ++i) {
      const auto& ports = spec_.stages[i].type->ports;
      for (PortId port = 0; port < ports.size(); ++port) {
        if (spec_.connection_from(i, port)) continue;
        diagnostics_.error(spec_.stages[i].where,
                           "port '" + port_label(i, port) + "' of " + stage_label(i) +
                               " is not connected: add an edge '" + port_label(i, port) +
                               " -> <stage>'" +
                               (ports[port].kind == PortKind::stream ? " (or '-> sink')" : ""));
      }
    }
  }

  void check_entry() {
    if (!spec_.stages.empty() && spec_.stages[0].type->kind != StageKind::request) {
      diagnostics_.error(spec_.stages[0].where,
                         stage_label(0) +
                             " cannot be the first stage: a pipeline starts with a "
                             "request stage, and stream stages follow the stage that "
                             "generates the response");
    }
  }

  void check_cycles() {
    enum class Mark { unvisited, in_progress, done };
    std::vector<Mark> marks(spec_.stages.size(), Mark::unvisited);
    std::vector<size_t> path;
    std::function<void(size_t)> visit = [&](size_t stage) {
      marks[stage] = Mark::in_progress;
      path.push_back(stage);
      for (const auto& connection : spec_.connections) {
        if (connection.from_stage != stage || connection.to_stage == kSinkStage) continue;
        size_t next = connection.to_stage;
        if (marks[next] == Mark::in_progress) {
          std::string cycle;
          auto start = std::find(path.begin(), path.end(), next);
          for (auto it = start; it != path.end(); ++it)
            cycle += spec_.stages[*it].name + " -> ";
          diagnostics_.error(connection.where,
                             "the connection '" + port_label(stage, connection.from_port) + " -> " +
                                 spec_.stages[next].name + "' closes a cycle: " + cycle +
                                 spec_.stages[next].name);
        } else if (marks[next] == Mark::unvisited) {
          visit(next);
        }
      }
      path.pop_back();
      marks[stage] = Mark::done;
    };
    for (size_t i = 0; i < spec_.stages.size(); ++i) {
      if (marks[i] == Mark::unvisited) visit(i);
    }
  }

  void check_reachability() {
    std::vector<bool> reached(spec_.stages.size(), false);
    std::vector<size_t> pending = {0};
    reached[0] = true;
    while (!pending.empty()) {
      size_t stage = pending.back();
      pending.pop_back();
      for (const auto& connection : spec_.connections) {
        if (connection.from_stage != stage || connection.to_stage == kSinkStage) continue;
        if (!reached[connection.to_stage]) {
          reached[connection.to_stage] = true;
          pending.push_back(connection.to_stage);
        }
      }
    }
    for (size_t i = 1; i < spec_.stages.size(); ++i) {
      if (reached[i]) continue;
      diagnostics_.error(
          spec_.stages[i].where,
          stage_label(i) + " is never reached from the first stage '" + spec_.stages[0].name +
              "': no edge leads to it (the stage before it sends its default port elsewhere)");
    }
  }

  void check_reference(const ResourceReference& reference, const std::string& owner) {
    auto found = std::find_if(
        spec_.resources.begin(), spec_.resources.end(),
        [&](const ResourceSpec& resource) { return resource.name == reference.resource_name; });
    if (found == spec_.resources.end()) {
      std::vector<std::string> names;
      for (const auto& resource : spec_.resources) {
        if (accepts_resource_type(reference.resource_type, resource.type->name))
          names.push_back(resource.name);
      }
      diagnostics_.error(reference.where, owner + ": key '" + reference.key + "' names resource '" +
                                              reference.resource_name +
                                              "', which is not declared under "
                                              "'resources:'" +
                                              did_you_mean(reference.resource_name, names) +
                                              " (declared " + reference.resource_type +
                                              " resources: " + join_names(names) + ")");
    } else if (!accepts_resource_type(reference.resource_type, found->type->name)) {
      diagnostics_.error(reference.where,
                         owner + ": key '" + reference.key + "' needs a resource of type " +
                             reference.resource_type + ", but '" + reference.resource_name +
                             "' is of type " + found->type->name);
    }
  }

  // Resources are created in an order where each comes after those it references.
  void check_resource_references() {
    for (const auto& stage : spec_.stages) {
      for (const auto& reference : stage.references) {
        check_reference(reference, "stage '" + stage.name + "' (" + stage.type->name + ")");
      }
    }
    for (const auto& resource : spec_.resources) {
      for (const auto& reference : resource.references) {
        check_reference(reference,
                        "resource '" + resource.name + "' (" + resource.type->name + ")");
      }
    }
    if (!diagnostics_.empty()) return;
    std::vector<ResourceSpec> ordered;
    std::map<std::string, int> state;  // 1: being placed, 2: placed
    std::function<bool(const ResourceSpec&)> place = [&](const ResourceSpec& resource) {
      if (state[resource.name] == 2) return true;
      if (state[resource.name] == 1) {
        diagnostics_.error(resource.where, "resource '" + resource.name +
                                               "' depends on itself through its references");
        return false;
      }
      state[resource.name] = 1;
      for (const auto& reference : resource.references) {
        for (const auto& other : spec_.resources) {
          if (other.name == reference.resource_name && !place(other)) return false;
        }
      }
      state[resource.name] = 2;
      ordered.push_back(resource);
      return true;
    };
    for (const auto& resource : spec_.resources) {
      if (!place(resource)) return;
    }
    spec_.resources = std::move(ordered);
  }

  PipelineSpec& spec_;
  Diagnostics& diagnostics_;
  std::vector<std::string> stage_names_;
};

}  // namespace

void check_pipeline_graph(PipelineSpec& spec, const ConfigValue* edges, Diagnostics& diagnostics) {
  GraphChecker(spec, diagnostics).run(edges);
}

}  // namespace chatflow
