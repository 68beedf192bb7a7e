// What runs an agent's tool call (stages/agent.cpp): the built-in executors (an HTTP endpoint,
// the retrieval index) and the tool types plugins provide. A plugin's tool type is a resource
// type: declared under `resources:` with its own keys, and named by a tool's `resource:` key,
// so its configuration is checked like any other resource's.
#pragma once

#include <functional>
#include <string>

#include "framework/api/request.h"
#include "framework/api/resource.h"

namespace chatflow {

// What an executor learns about the call besides its arguments.
struct ToolCallContext {
  const Identity* identity = nullptr;  // the caller (a search reads the index as them)
  std::string request_id;
  Clock::time_point deadline;  // the agent loop's: nothing may run past it
  std::function<bool()> cancelled;
};

struct ToolOutcome {
  std::string status;   // ok, error, timeout
  std::string content;  // the result (ok), or what went wrong, for the model and the trace
  int attempts = 1;
};

class ToolExecutor {
 public:
  virtual ~ToolExecutor() = default;
  // May run concurrently for different requests.
  virtual ToolOutcome call(const std::string& arguments, const ToolCallContext& context) const = 0;
};

// A resource that is a tool executor (a plugin's tool type).
class ToolExecutorResource : public Resource, public ToolExecutor {};

}  // namespace chatflow
