// The MCP client against servers written here: a small stdio server in Python (the lifecycle,
// tools/list in two pages, tools/call, a ping it asks of the client, a notification before each
// answer) and its failure modes (a command that is not there, a server that exits at once, one
// that never answers, one that answers late, one that writes what is not JSON, one that dies
// in a call), and a Streamable HTTP server on loopback (JSON and event-stream answers, the
// session id, an expired session, garbage). The real reference server from npm is driven by
// tests/server/agent_mcp.test.mjs. JSON-RPC framing is tested alone first.
#include "framework/tools/mcp_client.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <signal.h>
#include <thread>

#include <gtest/gtest.h>

#include "support/recording_http_server.h"
#include "support/temp_model.h"

namespace chatflow::tools {
namespace {
namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using chatflow::testing::http_response;
using chatflow::testing::RecordedRequest;
using chatflow::testing::RecordingServer;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(JsonRpc, RequestsAndNotificationsAreJsonRpcTwo) {
  EXPECT_EQ(
      json::parse(jsonrpc::request(7, "tools/list", {{"cursor", "b"}})),
      json::parse(R"({"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":"b"}})"));
  EXPECT_EQ(json::parse(jsonrpc::notification("notifications/initialized", {})),
            json::parse(R"({"jsonrpc":"2.0","method":"notifications/initialized"})"));
}

TEST(JsonRpc, ResponsesRequestsNotificationsAndBatchesAreRead) {
  std::string error;
  auto messages = jsonrpc::read_messages(
      R"([{"jsonrpc":"2.0","id":1,"result":{"a":1}},
          {"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no such method"}},
          {"jsonrpc":"2.0","id":"s1","method":"ping"},
          {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}])",
      error);
  ASSERT_TRUE(messages) << error;
  ASSERT_EQ(messages->size(), 4u);
  EXPECT_EQ((*messages)[0].kind, jsonrpc::Message::Kind::response);
  EXPECT_EQ((*messages)[0].result, json::parse(R"({"a":1})"));
  EXPECT_TRUE((*messages)[1].failed);
  EXPECT_EQ((*messages)[1].error_code, -32601);
  EXPECT_EQ((*messages)[1].error_message, "no such method");
  EXPECT_EQ((*messages)[2].kind, jsonrpc::Message::Kind::request);
  EXPECT_EQ((*messages)[2].id, "s1");
  EXPECT_EQ((*messages)[3].kind, jsonrpc::Message::Kind::notification);
  EXPECT_EQ((*messages)[3].method, "notifications/progress");
}

TEST(JsonRpc, WhatIsNotJsonRpcIsRefusedQuotingIt) {
  std::string error;
  EXPECT_FALSE(jsonrpc::read_messages("hello world", error));
  EXPECT_TRUE(contains(error, "not JSON")) << error;
  EXPECT_TRUE(contains(error, "'hello world'")) << error;
  EXPECT_FALSE(jsonrpc::read_messages(R"({"id":1,"result":{}})", error));
  EXPECT_TRUE(contains(error, "\"jsonrpc\": \"2.0\"")) << error;
  EXPECT_FALSE(jsonrpc::read_messages(R"({"jsonrpc":"2.0","id":1})", error));
  EXPECT_TRUE(contains(error, "neither a \"result\" nor an \"error\"")) << error;
}

TEST(JsonRpc, EventStreamDataIsJoinedPerEvent) {
  auto events = jsonrpc::event_stream_data(
      ": comment\r\nevent: message\r\nid: 1\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n"
      "retry: 100\n\ndata:{\"b\":2}\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], "{\"a\":\n1}");
  EXPECT_EQ(events[1], "{\"b\":2}");
}

TEST(McpResultText, TextPartsAreShownAndOtherPartsNamed) {
  auto result = json::parse(R"({"content":[
      {"type":"text","text":"first"},
      {"type":"image","data":"AAAA","mimeType":"image/png"},
      {"type":"resource","resource":{"uri":"file:///a.txt","text":"inside"}},
      {"type":"resource_link","uri":"file:///b.txt","name":"b"},
      {"type":"text","text":"last"}]})")
                    .as_object();
  EXPECT_EQ(mcp_result_text(result),
            "first\n[image image/png: not shown]\ninside\n[resource link: file:///b.txt]\nlast");
  EXPECT_EQ(
      mcp_result_text(json::parse(R"({"content":[],"structuredContent":{"t":21}})").as_object()),
      R"({"t":21})");
}

// A stdio MCP server in Python. Its behaviour is chosen by its first argument; each start is
// counted in the file named by the second.
const char* const kServerScript = R"PY(
import json, os, sys, time
mode, starts = sys.argv[1], sys.argv[2]
with open(starts, "a") as f:
    f.write("%d\n" % os.getpid())
if mode == "exit":
    sys.stderr.write("boom: the database is not there\n")
    sys.exit(3)
if mode == "silent":
    time.sleep(60)
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)
pending = {}
while True:
    message = read()
    if "method" not in message:
        continue
    method, ident = message["method"], message.get("id")
    if method == "initialize":
        version = message["params"]["protocolVersion"]
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}})
        send({"jsonrpc": "2.0", "id": ident, "result": {"protocolVersion": "2024-11-05" if mode == "old" else version,
              "capabilities": {"tools": {}}, "serverInfo": {"name": "test", "version": "1"}}})
    elif method == "notifications/initialized":
        pass
    elif method == "tools/list":
        cursor = message.get("params", {}).get("cursor")
        if cursor is None:
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [
                {"name": "echo", "description": "Says it again.", "inputSchema": {"type": "object",
                 "properties": {"text": {"type": "string"}}, "required": ["text"]}}], "nextCursor": "page2"}})
        else:
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [
                {"name": "fail", "inputSchema": {"type": "object"}},
                {"name": "env", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        name, args = message["params"]["name"], message["params"]["arguments"]
        if name == "echo":
            # The server asks the client a question first, and answers only once it is answered.
            send({"jsonrpc": "2.0", "id": "ask-1", "method": "ping"})
            reply = read()
            while reply.get("id") != "ask-1":
                reply = read()
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "Echo: " + args["text"]}]}})
        elif name == "fail":
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "no such city"}], "isError": True}})
        elif name == "env":
            text = "SECRET=%s GREETING=%s" % (os.environ.get("CHATFLOW_TEST_SECRET"), os.environ.get("GREETING"))
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}})
        elif name == "slow":
            time.sleep(float(args.get("seconds", 1)))
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "late"}]}})
        elif name == "garbage":
            sys.stdout.write("hello world\n")
            sys.stdout.flush()
        elif name == "die":
            sys.stderr.write("dying now\n")
            sys.exit(5)
    elif ident is not None:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "unknown"}})
)PY";

std::string script_path() {
  static const std::string path =
      chatflow::testing::write_temp_file("mcp_test_server.py", kServerScript);
  return path;
}

struct StdioServer {
  std::string starts_file;
  std::unique_ptr<McpClient> client;

  std::vector<std::string> pids() const {
    std::ifstream in(starts_file);
    std::vector<std::string> all;
    for (std::string line; std::getline(in, line);)
      all.push_back(line);
    return all;
  }
  int starts() const { return static_cast<int>(pids().size()); }
};

StdioServer stdio_server(const std::string& mode, double startup_s = 10) {
  StdioServer server;
  server.starts_file = chatflow::testing::fresh_path("mcp-starts-" + mode);
  McpServerSpec spec;
  spec.name = "py-" + mode;
  McpStdioOptions stdio;
  stdio.command = "python3";
  stdio.args = {"-u", script_path(), mode, server.starts_file};
  stdio.env = {{"GREETING", "hello"}};
  spec.stdio = stdio;
  spec.startup_timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(startup_s));
  server.client = std::make_unique<McpClient>(spec);
  return server;
}

McpCallOptions within(double seconds) {
  return {Clock::now() +
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)),
          {}};
}

std::vector<std::string> names(const McpToolList& list) {
  std::vector<std::string> all;
  if (list.tools)
    for (const auto& tool : *list.tools)
      all.push_back(tool.name);
  return all;
}

TEST(McpStdio, EveryPageOfToolsIsListedWithDescriptionsAndSchemas) {
  auto server = stdio_server("normal");
  McpToolList list = server.client->tools(within(10));
  ASSERT_EQ(list.status, "ok") << list.error;
  EXPECT_EQ(names(list), (std::vector<std::string>{"echo", "fail", "env"}));
  EXPECT_EQ((*list.tools)[0].description, "Says it again.");
  EXPECT_EQ((*list.tools)[0].input_schema,
            json::parse(R"({"type":"object","properties":{"text":{"type":"string"}},
                            "required":["text"]})"));
  server.client->tools(within(10));
  EXPECT_EQ(server.starts(), 1) << "one process, its list kept";
}

TEST(McpStdio, ACallReturnsTheTextAfterTheClientAnswersTheServersPing) {
  auto server = stdio_server("normal");
  McpCallOutcome outcome = server.client->call("echo", R"({"text":"bonjour"})", within(10));
  EXPECT_EQ(outcome.status, "ok") << outcome.content;
  EXPECT_EQ(outcome.content, "Echo: bonjour");
}

TEST(McpStdio, IsErrorTrueIsAnErrorWithTheToolsText) {
  auto server = stdio_server("normal");
  McpCallOutcome outcome = server.client->call("fail", "{}", within(10));
  EXPECT_EQ(outcome.status, "error");
  EXPECT_EQ(outcome.content, "no such city");
  EXPECT_FALSE(outcome.transport_failure);
}

TEST(McpStdio, TheChildGetsItsConfiguredEnvironmentButNotTheServersSecrets) {
  setenv("CHATFLOW_TEST_SECRET", "s3cret", 1);
  auto server = stdio_server("normal");
  McpCallOutcome outcome = server.client->call("env", "{}", within(10));
  unsetenv("CHATFLOW_TEST_SECRET");
  EXPECT_EQ(outcome.content, "SECRET=None GREETING=hello");
}

TEST(McpStdio, AnOlderProtocolVersionTheServerAnswersIsAccepted) {
  auto server = stdio_server("old");
  EXPECT_EQ(server.client->tools(within(10)).status, "ok");
}

TEST(McpStdio, ACommandThatIsNotThereIsAnErrorNamingTheServer) {
  McpServerSpec spec;
  spec.name = "ghost";
  spec.stdio = McpStdioOptions{};
  spec.stdio->command = "chatflow-no-such-mcp-server";
  McpClient client(spec);
  McpToolList list = client.tools(within(5));
  EXPECT_EQ(list.status, "error");
  EXPECT_EQ(list.error,
            "MCP server 'ghost' cannot run 'chatflow-no-such-mcp-server': No such file or "
            "directory (starting)");
}

TEST(McpStdio, AServerThatExitsAtOnceIsAnErrorWithItsStatusAndStderr) {
  auto server = stdio_server("exit");
  McpToolList list = server.client->tools(within(10));
  EXPECT_EQ(list.status, "error");
  EXPECT_TRUE(contains(list.error, "MCP server 'py-exit' exited with status 3")) << list.error;
  EXPECT_TRUE(contains(list.error, "its stderr ends: boom: the database is not there"))
      << list.error;
}

// The first restart is at once; after a second failure in a row the next start waits.
TEST(McpStdio, RestartsBackOffAfterFailuresInARow) {
  auto server = stdio_server("exit");
  server.client->tools(within(10));
  server.client->tools(within(10));
  EXPECT_EQ(server.starts(), 2);
  McpToolList list = server.client->tools(within(10));
  EXPECT_EQ(server.starts(), 2) << "not started again during the pause";
  EXPECT_TRUE(contains(list.error, "MCP server 'py-exit' is not started again for another"))
      << list.error;
  EXPECT_TRUE(contains(list.error, "2 failures in a row); the last: MCP server 'py-exit' exited"))
      << list.error;
}

TEST(McpStdio, AServerThatNeverAnswersInitializeTimesOut) {
  auto server = stdio_server("silent", 0.3);
  McpToolList list = server.client->tools(within(10));
  EXPECT_EQ(list.status, "timeout");
  EXPECT_EQ(list.error, "MCP server 'py-silent' gave no answer before the deadline (initialize)");
}

// A late answer is dropped: the next call gets its own.
TEST(McpStdio, ACallPastItsDeadlineTimesOutAndTheNextCallGetsItsOwnAnswer) {
  auto server = stdio_server("normal");
  // Started and initialised first: on a loaded machine (a sanitizer run) starting Python alone
  // can take longer than the short deadline below, which is meant for the call.
  ASSERT_EQ(server.client->tools(within(10)).status, "ok");
  McpCallOutcome slow = server.client->call("slow", R"({"seconds":1})", within(0.3));
  EXPECT_EQ(slow.status, "timeout");
  EXPECT_EQ(slow.content, "MCP server 'py-normal' gave no answer before the deadline (tools/call)");
  McpCallOutcome next = server.client->call("echo", R"({"text":"again"})", within(10));
  EXPECT_EQ(next.status, "ok") << next.content;
  EXPECT_EQ(next.content, "Echo: again");
  EXPECT_EQ(server.starts(), 1);
}

TEST(McpStdio, GarbageOnStdoutIsAnErrorAndTheServerIsStartedAgain) {
  auto server = stdio_server("normal");
  McpCallOutcome garbage = server.client->call("garbage", "{}", within(10));
  EXPECT_EQ(garbage.status, "error");
  EXPECT_TRUE(
      contains(garbage.content, "MCP server 'py-normal' wrote on stdout a line that is not JSON"))
      << garbage.content;
  EXPECT_TRUE(contains(garbage.content, "'hello world'")) << garbage.content;
  McpCallOutcome next = server.client->call("echo", R"({"text":"fresh"})", within(10));
  EXPECT_EQ(next.content, "Echo: fresh");
  EXPECT_EQ(server.starts(), 2);
}

TEST(McpStdio, AServerThatDiesInACallIsAnErrorAndIsStartedAgain) {
  auto server = stdio_server("normal");
  McpCallOutcome died = server.client->call("die", "{}", within(10));
  EXPECT_EQ(died.status, "error");
  EXPECT_TRUE(died.transport_failure);
  EXPECT_TRUE(contains(died.content, "MCP server 'py-normal' exited with status 5"))
      << died.content;
  EXPECT_TRUE(contains(died.content, "dying now")) << died.content;
  McpCallOutcome next = server.client->call("echo", R"({"text":"back"})", within(10));
  EXPECT_EQ(next.content, "Echo: back");
  EXPECT_EQ(server.starts(), 2);
}

// Killed between calls: found dead before the next message is written, and started again.
TEST(McpStdio, AServerKilledWhileIdleIsStartedAgainOnNextUse) {
  auto server = stdio_server("normal");
  ASSERT_EQ(server.client->call("echo", R"({"text":"one"})", within(10)).content, "Echo: one");
  ASSERT_EQ(server.starts(), 1);
  pid_t pid = std::stoi(server.pids()[0]);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // Until it is a zombie (chatflow reaps it on its next use).
  for (int i = 0; i < 500; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    if (text.empty() || text.find(") Z ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  McpToolList list = server.client->tools(within(10));
  EXPECT_EQ(list.status, "ok") << list.error;
  McpCallOutcome outcome = server.client->call("echo", R"({"text":"two"})", within(10));
  EXPECT_EQ(outcome.status, "ok") << outcome.content;
  EXPECT_EQ(outcome.content, "Echo: two");
  EXPECT_EQ(server.starts(), 2);
}

// Streamable HTTP: a loopback server answering as the test says.
std::string with_headers(int status, const std::string& type, const std::string& body,
                         const std::string& extra) {
  std::string response = http_response(status, type, body);
  size_t end = response.find("\r\n");
  return response.substr(0, end + 2) + extra + response.substr(end + 2);
}

std::unique_ptr<McpClient> http_client(const std::string& url) {
  McpServerSpec spec;
  spec.name = "web";
  std::string error;
  McpHttpOptions http;
  http.endpoint = *parse_http_url(url + "/mcp", error);
  http.headers = {{"Authorization", "Bearer tool-key"}};
  spec.http = http;
  return std::make_unique<McpClient>(spec);
}

std::string method_of(const RecordedRequest& request) {
  json::value body = json::parse(request.body);
  return std::string(body.as_object().at("method").as_string());
}

TEST(McpHttp, JsonAndEventStreamAnswersAndTheSessionIdIsSentBack) {
  RecordingServer server([](const RecordedRequest& request) {
    json::object body = json::parse(request.body).as_object();
    std::string method(body.at("method").as_string());
    if (method == "initialize") {
      return with_headers(
          200, "application/json",
          jsonrpc::response(body.at("id"), json::object{{"protocolVersion", "2025-06-18"},
                                                        {"capabilities", json::object{}}}),
          "Mcp-Session-Id: session-42\r\n");
    }
    if (method == "notifications/initialized") return http_response(202, "text/plain", "");
    std::string result =
        method == "tools/list"
            ? jsonrpc::response(body.at("id"), json::parse(R"({"tools":[{"name":"add",
                  "inputSchema":{"type":"object"}}]})"))
            : jsonrpc::response(body.at("id"),
                                json::parse(R"({"content":[{"type":"text","text":"3"}]})"));
    return http_response(200, "text/event-stream",
                         "event: message\ndata: " +
                             jsonrpc::notification("notifications/progress", {{"progress", 1}}) +
                             "\n\nevent: message\ndata: " + result + "\n\n");
  });
  auto client = http_client(server.url());
  McpToolList list = client->tools(within(10));
  ASSERT_EQ(list.status, "ok") << list.error;
  EXPECT_EQ(names(list), (std::vector<std::string>{"add"}));
  McpCallOutcome outcome = client->call("add", R"({"a":1,"b":2})", within(10));
  EXPECT_EQ(outcome.status, "ok") << outcome.content;
  EXPECT_EQ(outcome.content, "3");
  auto received = server.requests();
  ASSERT_EQ(received.size(), 4u);
  EXPECT_EQ(method_of(received[0]), "initialize");
  EXPECT_EQ(received[0].headers.count("mcp-session-id"), 0u);
  EXPECT_EQ(received[0].headers["accept"], "application/json, text/event-stream");
  for (size_t i = 0; i < received.size(); ++i) {
    EXPECT_EQ(received[i].method, "POST");
    EXPECT_EQ(received[i].target, "/mcp");
    EXPECT_EQ(received[i].headers["authorization"], "Bearer tool-key");
    if (i == 0) continue;
    EXPECT_EQ(received[i].headers["mcp-session-id"], "session-42") << method_of(received[i]);
    EXPECT_EQ(received[i].headers["mcp-protocol-version"], "2025-06-18");
  }
  json::object call = json::parse(received[3].body).as_object();
  EXPECT_EQ(call.at("params"), json::parse(R"({"name":"add","arguments":{"a":1,"b":2}})"));
}

// A 404 for the session id: the client initialises again and repeats the call once.
TEST(McpHttp, AnExpiredSessionIsInitialisedAgain) {
  std::atomic<int> sessions{0};
  std::atomic<bool> expired{false};
  RecordingServer server([&](const RecordedRequest& request) {
    json::object body = json::parse(request.body).as_object();
    std::string method(body.at("method").as_string());
    if (method == "initialize") {
      std::string id = "s" + std::to_string(++sessions);
      return with_headers(
          200, "application/json",
          jsonrpc::response(body.at("id"), json::object{{"protocolVersion", "2025-03-26"}}),
          "Mcp-Session-Id: " + id + "\r\n");
    }
    if (!body.contains("id")) return http_response(202, "text/plain", "");
    if (request.headers.at("mcp-session-id") == "s1" && !expired.exchange(true))
      return http_response(404, "application/json", "{}");
    return http_response(200, "application/json",
                         jsonrpc::response(body.at("id"), json::parse(R"({"content":[
                             {"type":"text","text":"ok"}]})")));
  });
  auto client = http_client(server.url());
  McpCallOutcome outcome = client->call("add", "{}", within(10));
  EXPECT_EQ(outcome.status, "ok") << outcome.content;
  EXPECT_EQ(sessions.load(), 2);
  EXPECT_EQ(server.requests().back().headers["mcp-session-id"], "s2");
}

TEST(McpHttp, AnAnswerThatIsNotJsonRpcIsAnErrorNamingTheServer) {
  RecordingServer server(
      [](const RecordedRequest&) { return http_response(200, "application/json", "<html>"); });
  auto client = http_client(server.url());
  McpToolList list = client->tools(within(10));
  EXPECT_EQ(list.status, "error");
  EXPECT_TRUE(contains(list.error, "MCP server 'web' answered not JSON")) << list.error;
  EXPECT_TRUE(contains(list.error, "(initialize)")) << list.error;
}

TEST(McpHttp, AnErrorStatusIsAnErrorWithTheBody) {
  RecordingServer server([](const RecordedRequest&) {
    return http_response(401, "application/json", R"({"error":"bad token"})");
  });
  auto client = http_client(server.url());
  McpToolList list = client->tools(within(10));
  EXPECT_EQ(list.error,
            R"(MCP server 'web' answered HTTP 401: {"error":"bad token"} (initialize))");
}

}  // namespace
}  // namespace chatflow::tools
