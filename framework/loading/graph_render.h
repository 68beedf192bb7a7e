// Draws a checked pipeline as Graphviz DOT or Mermaid: stages with their types, ports as edge
// labels (thick for the response stream), resources and the keys that reference them; or as SVG
// laid out here, for the server's dashboard.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "framework/loading/pipeline_spec.h"

namespace chatflow {

std::string render_dot(const PipelineSpec& spec);
std::string render_mermaid(const PipelineSpec& spec);

// Each stage's layer: the longest path to it from the entry stage (0), so a stage is drawn
// below every stage that feeds it and the arms of a branch share a layer.
std::vector<size_t> stage_depths(const PipelineSpec& spec);
// Each stage's A/B arm: the port of an ab_split stage from which alone the stage is reached
// ("" for stages every arm reaches, or none).
std::vector<std::string> stage_arms(const PipelineSpec& spec);

// A standalone SVG of the stages in layers top to bottom (branches and arms side by side), the
// sink last, edges as paths with arrowheads. Each stage is
//   <g class="stage" data-stage="NAME" data-type="TYPE" data-kind="request|stream"
//      [data-arm="ARM"]><rect/><text class="stage-name"/><text class="stage-type"/>
//      <text class="stage-stats" data-stage="NAME"></text></g>
// for a page to colour and fill in; every name is XML-escaped.
std::string render_svg(const PipelineSpec& spec);

}  // namespace chatflow
