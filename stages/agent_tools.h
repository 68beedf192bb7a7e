// The built-in executors behind an agent's tools (framework/api/tool_executor.h): an HTTP(S)
// endpoint (POST of the arguments as JSON, with a timeout, an Idempotency-Key per call and
// retries only for idempotent tools; https verified against ca_file or the system's CAs) and the
// pipeline's retrieval index as a `search` tool. The agent stage (agent.cpp) decides whether a call
// may run; an executor only runs it.
#pragma once

#include <memory>
#include <string>

#include "framework/api/request.h"
#include "framework/api/tool_executor.h"
#include "framework/grammar/grammar.h"
#include "framework/tools/http_post.h"
#include "stages/retrieval_index.h"

namespace chatflow {

// A tool as the agent loop offers and runs it: declared in the YAML, or listed by an MCP server.
struct AgentTool {
  ToolDefinition definition;
  std::vector<std::string> roles;  // empty: every caller
  std::shared_ptr<const grammar::Grammar> arguments;
  std::shared_ptr<const ToolExecutor> executor;

  bool permits(const Identity& identity) const {
    if (roles.empty()) return true;
    for (const auto& role : roles)
      if (identity.has_role(role)) return true;
    return false;
  }
};

// The YAML keys of a tool's `http:` executor.
struct HttpToolConfig {
  std::string url;
  double timeout_s = 10;  // each attempt
  int64_t retries = 0;    // more attempts after a failure, only when idempotent
  bool idempotent = false;
  int64_t max_response_bytes = 65536;
  std::string ca_file;  // https: PEM CAs trusted; empty: the system's trust store
};

// Throws ConfigError for a URL that is not http:// or https://, a ca_file on a plain http URL,
// or a ca_file that cannot be used.
std::unique_ptr<ToolExecutor> make_http_tool(const HttpToolConfig& config);

// The YAML keys of a tool's `search:` executor.
struct SearchToolConfig {
  std::string index;
  int64_t top_k = 3;
};

// The arguments' schema a search tool has unless its YAML gives one.
extern const char* const kSearchParameters;

std::unique_ptr<ToolExecutor> make_search_tool(std::shared_ptr<RetrievalIndexResource> index,
                                               const SearchToolConfig& config);

}  // namespace chatflow
