// An agent's MCP tool servers (`mcp_servers:` in the agent's config): each a child process over
// stdio (`command`, `args`, `env`) or a Streamable HTTP endpoint (`url`, `headers`), whose tools
// are listed on first use (framework/tools/mcp_client.h) and offered to the model beside the
// pipeline's own, under the same rules: roles, the loop's budgets and deadline, a per-call
// timeout, retries only for idempotent servers, and the result fenced, cut and screened by the
// agent like any other.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framework/api/config_schema.h"
#include "framework/tools/mcp_client.h"
#include "stages/agent_tools.h"

namespace chatflow {

// The YAML keys of one entry of `mcp_servers:`.
struct McpServerConfig {
  std::string name;
  std::string command;  // stdio: the program (on PATH unless it has a '/')
  std::vector<std::string> args;
  std::map<std::string, std::string> env;  // stdio: added to a minimal environment
  std::string url;                         // Streamable HTTP: the server's endpoint
  std::map<std::string, std::string> headers;
  std::string ca_file;    // https: PEM CAs trusted; empty: the system's trust store
  double timeout_s = 30;  // each call (never past the loop's own deadline)
  double startup_timeout_s = 10;
  std::vector<std::string> tools;  // the server's tools offered, by its names; empty: all
  std::vector<std::string> roles;  // who may call them; empty: every caller
  bool prefix = true;              // offered as <name>_<tool>
  bool idempotent = false;
  int64_t retries = 0;
  int64_t max_response_bytes = 1 << 20;
};

SchemaBuilder<McpServerConfig> mcp_server_schema();

class McpToolServer {
 public:
  // Throws ConfigError (naming the key) for a config that cannot work; starts nothing.
  explicit McpToolServer(McpServerConfig config);

  const std::string& name() const { return config_.name; }

  bool permits(const Identity& identity) const;

  // The server's tools as the agent offers them; `error` (naming the server) when they could
  // not be listed. Tools whose names or schemas the agent cannot use are left out and logged.
  struct Offer {
    std::shared_ptr<const std::vector<AgentTool>> tools;
    std::string status;  // ok, error, timeout
    std::string error;
  };
  Offer discover(Clock::time_point deadline, const std::function<bool()>& cancelled);

 private:
  McpServerConfig config_;
  std::shared_ptr<tools::McpClient> client_;
  std::mutex mutex_;
  std::shared_ptr<const std::vector<tools::McpTool>> listed_;  // what offered_ was made from
  std::shared_ptr<const std::vector<AgentTool>> offered_;
};

}  // namespace chatflow
