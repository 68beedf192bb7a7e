#include "stages/agent_mcp.h"

#include <thread>

#include <spdlog/spdlog.h>

#include "framework/api/registry.h"
#include "framework/chat/tool_calls.h"

namespace chatflow {
namespace {
namespace json = boost::json;

Clock::duration seconds(double value) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(value));
}

// Runs one tool of one server: a call per attempt within the server's timeout and the loop's
// deadline; a call the server never answered is tried again only for an idempotent server.
class McpToolExecutor final : public ToolExecutor {
 public:
  McpToolExecutor(std::shared_ptr<tools::McpClient> client, std::string tool,
                  const McpServerConfig& config)
      : client_(std::move(client)),
        tool_(std::move(tool)),
        timeout_(seconds(config.timeout_s)),
        attempts_(config.idempotent ? static_cast<int>(config.retries) + 1 : 1) {}

  ToolOutcome call(const std::string& arguments, const ToolCallContext& context) const override {
    ToolOutcome outcome;
    for (int attempt = 1; attempt <= attempts_; ++attempt) {
      if (attempt > 1) {
        auto pause = std::chrono::milliseconds(50 * (attempt - 1));
        if (Clock::now() + pause >= context.deadline) break;
        std::this_thread::sleep_for(pause);
      }
      tools::McpCallOptions options{std::min(Clock::now() + timeout_, context.deadline),
                                    context.cancelled};
      tools::McpCallOutcome answer = client_->call(tool_, arguments, options);
      outcome.attempts = attempt;
      outcome.status = answer.status == "cancelled" ? "error" : answer.status;
      outcome.content = std::move(answer.content);
      if (!answer.transport_failure || answer.status == "cancelled") break;
    }
    return outcome;
  }

 private:
  std::shared_ptr<tools::McpClient> client_;
  std::string tool_;
  Clock::duration timeout_;
  int attempts_;
};

}  // namespace

SchemaBuilder<McpServerConfig> mcp_server_schema() {
  SchemaBuilder<McpServerConfig> server;
  server
      .key("name", &McpServerConfig::name,
           "the server's name: in errors, and before its tools' names (prefix)")
      .required();
  server.key("command", &McpServerConfig::command,
             "stdio transport: the program to run (on PATH unless it has a '/')");
  server.key("args", &McpServerConfig::args, "stdio: the program's arguments");
  server.key("env", &McpServerConfig::env,
             "stdio: environment variables set for it (besides PATH, HOME, LANG, LC_ALL, TMPDIR, "
             "USER, LOGNAME, SHELL, TERM; nothing else of the server's is passed)");
  server.key("url", &McpServerConfig::url,
             "Streamable HTTP transport: the server's http(s):// endpoint (https verified)");
  server.key("headers", &McpServerConfig::headers,
             "HTTP: header fields sent with every message (Authorization, ...)");
  server.key("ca_file", &McpServerConfig::ca_file,
             "https: PEM file of the CAs trusted; empty: the system's trust store");
  server
      .key("timeout_s", &McpServerConfig::timeout_s,
           "each call's time limit (never past the loop's timeout_s)")
      .range(0.001, 3600);
  server
      .key("startup_timeout_s", &McpServerConfig::startup_timeout_s,
           "time for the server to start and answer initialize")
      .range(0.001, 600);
  server.key("tools", &McpServerConfig::tools,
             "the server's tools offered, by the server's names (empty: all it lists)");
  server.key("roles", &McpServerConfig::roles,
             "roles that may call its tools (empty: every caller)");
  server.key("prefix", &McpServerConfig::prefix,
             "offer its tools as <name>_<tool> (false: under the server's own names)");
  server.key("idempotent", &McpServerConfig::idempotent,
             "calling its tools twice is harmless: calls it did not answer may be retried");
  server
      .key("retries", &McpServerConfig::retries,
           "attempts after a call it did not answer (died, timed out), only when idempotent")
      .range(0, 10);
  server
      .key("max_response_bytes", &McpServerConfig::max_response_bytes,
           "the longest message read from it")
      .range(1024, 64 << 20);
  return server;
}

McpToolServer::McpToolServer(McpServerConfig config) : config_(std::move(config)) {
  const std::string where;  // the caller names the entry
  if (!chat::valid_function_name(config_.name) || config_.name.size() > 32)
    throw ConfigError(where + "'name' is 1 to 32 letters, digits, '_' or '-'");
  bool stdio = !config_.command.empty();
  bool http = !config_.url.empty();
  if (stdio == http)
    throw ConfigError(where + "give either 'command' (stdio) or 'url' (Streamable HTTP)");
  if (stdio && (!config_.headers.empty() || !config_.ca_file.empty()))
    throw ConfigError(where + "'headers' and 'ca_file' are for a 'url' server, not a 'command'");
  if (http && (!config_.args.empty() || !config_.env.empty()))
    throw ConfigError(where + "'args' and 'env' are for a 'command' server, not a 'url'");
  tools::McpServerSpec spec;
  spec.name = config_.name;
  spec.startup_timeout = seconds(config_.startup_timeout_s);
  auto max_bytes = static_cast<size_t>(config_.max_response_bytes);
  if (stdio) {
    tools::McpStdioOptions options;
    options.command = config_.command;
    options.args = config_.args;
    options.env = config_.env;
    options.max_message_bytes = max_bytes;
    spec.stdio = std::move(options);
  } else {
    std::string error;
    auto endpoint = tools::parse_http_url(config_.url, error);
    if (!endpoint) throw ConfigError(where + "'url' " + error);
    tools::McpHttpOptions options;
    options.endpoint = std::move(*endpoint);
    options.headers.assign(config_.headers.begin(), config_.headers.end());
    options.max_message_bytes = max_bytes;
    if (options.endpoint.tls) {
      net::TlsClientOptions tls;
      tls.ca_file = config_.ca_file;
      try {
        options.tls = std::make_shared<const net::TlsClientContext>(tls);
      } catch (const net::TlsError& failure) {
        throw ConfigError(where + "'ca_file': " + failure.what());
      }
    } else if (!config_.ca_file.empty()) {
      throw ConfigError(where + "'ca_file' is set, but 'url' '" + config_.url +
                        "' is not https://: the calls would go unencrypted");
    }
    spec.http = std::move(options);
  }
  client_ = std::make_shared<tools::McpClient>(std::move(spec));
}

bool McpToolServer::permits(const Identity& identity) const {
  if (config_.roles.empty()) return true;
  for (const auto& role : config_.roles)
    if (identity.has_role(role)) return true;
  return false;
}

McpToolServer::Offer McpToolServer::discover(Clock::time_point deadline,
                                             const std::function<bool()>& cancelled) {
  tools::McpToolList list = client_->tools({deadline, cancelled});
  if (!list.tools) return {nullptr, list.status, list.error};
  std::lock_guard lock(mutex_);
  if (list.tools == listed_) return {offered_, "ok", {}};
  auto offered = std::make_shared<std::vector<AgentTool>>();
  for (const tools::McpTool& listed : *list.tools) {
    if (!config_.tools.empty() &&
        std::find(config_.tools.begin(), config_.tools.end(), listed.name) == config_.tools.end())
      continue;
    std::string name = config_.prefix ? config_.name + "_" + listed.name : listed.name;
    if (!chat::valid_function_name(name)) {
      spdlog::warn(
          "agent: MCP server '{}' tool '{}' is not offered: '{}' is not a function name "
          "(1 to 64 letters, digits, '_' or '-')",
          config_.name, listed.name, name);
      continue;
    }
    AgentTool tool;
    tool.definition.name = name;
    tool.definition.description = listed.description;
    json::value schema = listed.input_schema;
    try {
      tool.arguments = grammar::compile_json_schema(schema);
    } catch (const grammar::SchemaError& error) {
      spdlog::warn(
          "agent: MCP server '{}' tool '{}' is not offered: its inputSchema uses '{}', "
          "which cannot be enforced: {}",
          config_.name, listed.name, error.keyword(), error.what());
      continue;
    } catch (const std::exception& error) {
      spdlog::warn("agent: MCP server '{}' tool '{}' is not offered: its inputSchema: {}",
                   config_.name, listed.name, error.what());
      continue;
    }
    tool.definition.parameters = json::serialize(schema);
    tool.roles = config_.roles;
    tool.executor = std::make_shared<McpToolExecutor>(client_, listed.name, config_);
    offered->push_back(std::move(tool));
  }
  for (const auto& wanted : config_.tools) {
    bool found = std::any_of(list.tools->begin(), list.tools->end(),
                             [&](const tools::McpTool& tool) { return tool.name == wanted; });
    if (!found)
      spdlog::warn("agent: MCP server '{}' lists no tool '{}' (named in its 'tools')", config_.name,
                   wanted);
  }
  listed_ = list.tools;
  offered_ = std::move(offered);
  return {offered_, "ok", {}};
}

}  // namespace chatflow
