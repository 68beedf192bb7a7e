// Layer three of pipeline checking: the graph. Resolves `edges:` and list order into
// connections and reports unknown stages or ports, fan-out, cycles, unreachable stages,
// unconnected ports, stages on the wrong side of the stream, and bad resource references.
#pragma once

#include "framework/loading/pipeline_spec.h"

namespace chatflow {

// Fills `spec.connections` and puts `spec.resources` in creation order.
void check_pipeline_graph(PipelineSpec& spec, const ConfigValue* edges, Diagnostics& diagnostics);

}  // namespace chatflow
