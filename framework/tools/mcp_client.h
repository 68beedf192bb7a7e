// A Model Context Protocol client for one tool server: it starts the server (a child process
// over stdio, or a Streamable HTTP endpoint) when first used, runs the lifecycle (initialize,
// notifications/initialized), lists the server's tools (every page of tools/list, again after
// notifications/tools/list_changed or a restart) and calls them (tools/call). Every failure is an
// answer naming the server, never a throw or a wait past the caller's deadline; a stdio server
// that died or wrote something other than JSON-RPC is started again on the next use, after a
// pause that doubles with each failure in a row (0.5 s up to 30 s).
//
// One message exchange at a time per server: calls from concurrent requests wait their turn, up
// to their own deadline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "framework/tools/mcp_transport.h"

namespace chatflow::tools {

// The protocol versions this client speaks, newest first; the first is the one it asks for.
extern const char* const kMcpProtocolVersions[3];

struct McpServerSpec {
  std::string name;  // for messages: "MCP server 'name' ..."
  // Exactly one of the two transports.
  std::optional<McpStdioOptions> stdio;
  std::optional<McpHttpOptions> http;
  // How long initialize may take on a fresh start (within the caller's deadline).
  std::chrono::steady_clock::duration startup_timeout = std::chrono::seconds(10);
};

struct McpTool {
  std::string name;
  std::string description;
  boost::json::object input_schema;
};

struct McpToolList {
  std::shared_ptr<const std::vector<McpTool>> tools;  // null when `error` is set
  std::string status;                                 // ok, error, timeout
  std::string error;                                  // names the server
};

struct McpCallOutcome {
  std::string status;   // ok, error (isError, a failure), timeout
  std::string content;  // the text of the result, or what went wrong (naming the server)
  // Set when the server did not carry the call out or never answered (it died, timed out, was
  // unreachable): a retry of an idempotent tool may help. False for a tool's own error.
  bool transport_failure = false;
};

struct McpCallOptions {
  std::chrono::steady_clock::time_point deadline;
  std::function<bool()> cancelled;  // may be empty
};

// A lock that can be waited for until a deadline. Not std::timed_mutex: glibc locks it with
// pthread_mutex_clocklock, which GCC 12's ThreadSanitizer does not see, so every unlock was
// reported as the unlock of an unlocked mutex.
class DeadlineMutex {
 public:
  void lock() {
    std::unique_lock guard(mutex_);
    released_.wait(guard, [this] { return !held_; });
    held_ = true;
  }
  bool try_lock() {
    std::lock_guard guard(mutex_);
    if (held_) return false;
    held_ = true;
    return true;
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    std::unique_lock guard(mutex_);
    if (!released_.wait_until(guard, deadline, [this] { return !held_; })) return false;
    held_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard guard(mutex_);
      held_ = false;
    }
    released_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_;
  bool held_ = false;
};

class McpClient {
 public:
  explicit McpClient(McpServerSpec spec);
  ~McpClient();
  McpClient(const McpClient&) = delete;
  McpClient& operator=(const McpClient&) = delete;

  const std::string& name() const { return spec_.name; }

  // The server's tools: listed once and kept until the server restarts or says they changed.
  McpToolList tools(const McpCallOptions& options);

  // Calls `tool` with `arguments` (a JSON object's text). The text parts of the result's content,
  // one per line, are its content (other parts are named, not shown); isError: true is an error.
  McpCallOutcome call(const std::string& tool, const std::string& arguments,
                      const McpCallOptions& options);

 private:
  struct Answer {
    std::optional<boost::json::value> result;
    std::string status;  // when no result: error, timeout
    std::string error;   // when no result: names the server
    bool transport_failure = false;
  };

  // With the lock held: a started, initialised session, or an answer saying why not.
  std::optional<Answer> ready(const McpCallOptions& options);
  std::optional<Answer> start(const McpCallOptions& options);
  // One request over the session, initialising again once when an HTTP session expired.
  Answer exchange(const std::string& method, boost::json::object params,
                  const McpCallOptions& options);
  Answer failed(const McpFailure& failure, const std::string& doing);
  void note_failure(const std::string& error);
  Answer list_all(const McpCallOptions& options);

  McpServerSpec spec_;
  DeadlineMutex mutex_;
  std::unique_ptr<McpTransport> transport_;
  bool initialized_ = false;
  std::string protocol_version_;
  std::shared_ptr<const std::vector<McpTool>> tools_;
  bool tools_changed_ = false;
  int64_t next_id_ = 1;
  int failures_in_a_row_ = 0;
  std::chrono::steady_clock::time_point next_start_;
  std::string last_failure_;
};

// The text a tools/call result gives the model: its text parts, the text of embedded text
// resources, and a note for each part it cannot show (images, audio, links); the structured
// content when there is nothing else.
std::string mcp_result_text(const boost::json::object& result);

}  // namespace chatflow::tools
