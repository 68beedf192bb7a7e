// JSON-RPC 2.0 as the Model Context Protocol carries it: the messages a client writes (requests
// with an integer id, notifications without one), the messages a server may send back (a
// response to one of ours, a request or notification of its own), and the two framings MCP uses
// on top: one message per line (stdio) and server-sent events (a Streamable HTTP answer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

namespace chatflow::tools::jsonrpc {

// One message a peer sent.
struct Message {
  enum class Kind { response, request, notification };
  Kind kind = Kind::notification;
  boost::json::value id;  // response, request
  std::string method;     // request, notification
  boost::json::value params;
  // response: either a result, or an error with its code and message
  bool failed = false;
  boost::json::value result;
  int64_t error_code = 0;
  std::string error_message;
};

// A request to send (no trailing newline).
std::string request(int64_t id, std::string_view method, boost::json::object params);
// A notification to send (no trailing newline).
std::string notification(std::string_view method, boost::json::object params);
// The answer to a peer's request: a result, or an error when `error_message` is set.
std::string response(const boost::json::value& id, boost::json::value result);
std::string error_response(const boost::json::value& id, int64_t code, std::string_view message);

// Reads one JSON-RPC 2.0 message from `value`; nullopt with `error` saying what is wrong
// (not an object, no "jsonrpc": "2.0", neither a method nor a result or error).
std::optional<Message> read_message(const boost::json::value& value, std::string& error);

// The messages in `text`: one JSON object, or a batch (an array of them). nullopt with `error`
// when it is not JSON or a member is no JSON-RPC message; `error` quotes the start of the text.
std::optional<std::vector<Message>> read_messages(std::string_view text, std::string& error);

// The data of each event of a text/event-stream body (its `data:` lines joined by '\n'), in
// order; events without data (comments, retry hints) are left out.
std::vector<std::string> event_stream_data(std::string_view body);

// `text` shortened to `limit` characters for an error message, with "..." when cut.
std::string quote_start(std::string_view text, size_t limit = 200);

}  // namespace chatflow::tools::jsonrpc
