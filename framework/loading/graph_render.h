// Draws a checked pipeline as Graphviz DOT or Mermaid: stages with their types, ports as edge
// labels (thick for the response stream), resources and the keys that reference them.
#pragma once

#include <string>

#include "framework/loading/pipeline_spec.h"

namespace chatflow {

std::string render_dot(const PipelineSpec& spec);
std::string render_mermaid(const PipelineSpec& spec);

}  // namespace chatflow
