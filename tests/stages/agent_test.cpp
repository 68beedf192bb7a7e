// The agent stage in a pipeline without the HTTP server: its tools declared in YAML (the `search`
// tool over a small retrieval index built here, an `http` tool posting to a loopback server
// written here), who may call them, the bounds of the loop, what the model reads of a result,
// and the final answer written by the model stages on the longer conversation. The random-weight
// test model seldom calls a tool by itself, so the pipelines set `first_step: required` (and
// `later_steps: required` where more steps must call): the grammar then lets it write nothing but
// a valid call of an offered tool, with arguments its schema allows. Most pipelines end with
// echo, so the request shows the conversation the model stages would answer.
#include <atomic>
#include <filesystem>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/retrieval/prompt_assembly.h"
#include "stages/gguf_model.h"
#include "support/pipeline_helpers.h"
#include "support/recording_http_server.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {
namespace json = boost::json;

std::string model_path() {
  engine::ModelShape shape;  // the writer's defaults otherwise
  shape.layers = 1;
  shape.ffn = 96;
  shape.context = 4096;
  return temp_model(shape);
}

// The model and a one-document index: every search finds the leave policy.
std::string resources_yaml() {
  static const std::string resources = [] {
    std::string source = write_temp_file(
        "agent-docs.jsonl",
        "{\"id\": \"leave\", \"title\": \"Leave\", \"text\": \"Every employee has 25 days of "
        "annual leave.\"}\n");
    std::string directory = temp_path("agent-index");
    std::filesystem::remove_all(directory);
    return "version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() +
           "\"}\n  docs: {type: retrieval_index, path: \"" + directory + "\", source: [\"" +
           source + "\"]}\n";
  }();
  return resources;
}

const char* const kSearchTool =
    "        - {name: search, search: {index: docs},\n"
    "           parameters: {type: object, properties: {query: {type: string, enum: [leave, "
    "travel]}},\n"
    "                        required: [query], additionalProperties: false}}\n";

std::string http_tool(const std::string& url, const std::string& extra = "") {
  return "        - {name: get_weather, http: {url: \"" + url + "/weather\"}" + extra +
         ",\n           parameters: {type: object, properties: {city: {type: string, enum: "
         "[Paris, Oslo]}},\n                        required: [city], additionalProperties: "
         "false}}\n";
}

const char* const kEcho = "  - {name: echo, type: echo}\n";

// `settings`: more keys of the agent's config, one per line.
std::unique_ptr<Pipeline> agent_pipeline(const std::string& tools, const std::string& settings = "",
                                         const std::string& after = kEcho) {
  std::string indented;
  for (size_t at = 0; at < settings.size();) {
    size_t end = settings.find('\n', at);
    if (end == std::string::npos) end = settings.size();
    indented += "      " + settings.substr(at, end - at) + "\n";
    at = end + 1;
  }
  return build_yaml(resources_yaml() +
                        "stages:\n  - name: agent\n    type: agent\n    config:\n"
                        "      model: llm\n      first_step: required\n"
                        "      parallel_tool_calls: false\n      step_max_tokens: 96\n" +
                        indented + "      tools:\n" + tools + after,
                    builtin_registry());
}

std::shared_ptr<Request> ask(Pipeline& pipeline,
                             const std::function<void(Request&)>& prepare = {}) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("How many days of leave do I have?", sink);
  request->id = "chatcmpl-agent-1";
  request->generation.temperature = 0;
  if (prepare) prepare(*request);
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return request;
}

// The statuses of the trace: each call's, then how the loop ended.
std::vector<std::string> statuses(const Request& request) {
  std::vector<std::string> list;
  for (const auto& step : request.agent_steps)
    list.push_back(step.tool.empty() ? "end:" + step.status : step.tool + ":" + step.status);
  return list;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Agent, ARequiredFirstStepCallsTheToolAndItsFencedResultJoinsTheConversation) {
  auto pipeline = agent_pipeline(kSearchTool, "max_steps: 1");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"search:ok", "end:step_limit"}));
  EXPECT_EQ(request->annotation("agent"), "step_limit");
  ASSERT_EQ(request->messages.size(), 3u);
  const Message& call = request->messages[1];
  EXPECT_EQ(call.role, "assistant");
  ASSERT_EQ(call.tool_calls.size(), 1u);
  EXPECT_EQ(call.tool_calls[0].name, "search");
  const Message& result = request->messages[2];
  EXPECT_EQ(result.role, "tool");
  EXPECT_EQ(result.tool_call_id, call.tool_calls[0].id);
  EXPECT_EQ(result.content.rfind(retrieval::kToolResultBegin, 0), 0u) << result.content;
  EXPECT_TRUE(contains(result.content,
                       "[1] Leave (leave)\nEvery employee has 25 days of annual "
                       "leave."))
      << result.content;
  EXPECT_TRUE(contains(result.content, retrieval::kToolResultEnd)) << result.content;
}

TEST(Agent, ACallsArgumentsAreOnesTheToolsSchemaAllows) {
  auto pipeline = agent_pipeline(kSearchTool, "max_steps: 1");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->agent_steps.empty());
  json::value arguments = json::parse(request->agent_steps[0].arguments);
  ASSERT_TRUE(arguments.is_object()) << request->agent_steps[0].arguments;
  ASSERT_EQ(arguments.as_object().size(), 1u) << arguments;
  const json::value& query = arguments.as_object().at("query");
  EXPECT_TRUE(query == "leave" || query == "travel") << query;
}

// POSTed as JSON with a fresh Idempotency-Key and the request's id; the answer is what the model
// reads, fenced.
TEST(Agent, AnHttpToolIsPostedTheCallsArgumentsAndItsAnswerIsTheResult) {
  RecordingServer tool([](const RecordedRequest&) {
    return http_response(200, "application/json", R"({"forecast": "sunny"})");
  });
  auto pipeline = agent_pipeline(http_tool(tool.url()), "max_steps: 1");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"get_weather:ok", "end:step_limit"}));
  auto received = tool.requests();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].method, "POST");
  EXPECT_EQ(received[0].target, "/weather");
  EXPECT_EQ(received[0].headers["content-type"], "application/json");
  EXPECT_EQ(received[0].headers["x-request-id"], "chatcmpl-agent-1");
  EXPECT_EQ(received[0].headers["idempotency-key"].rfind("cf-", 0), 0u);
  EXPECT_EQ(json::parse(received[0].body), json::parse(request->agent_steps[0].arguments));
  ASSERT_EQ(request->messages.size(), 3u);
  EXPECT_TRUE(contains(request->messages[2].content, R"({"forecast": "sunny"})"))
      << request->messages[2].content;
}

TEST(Agent, ACallerWhoseRolesAllowNoToolIsOfferedNoneAndNothingRuns) {
  RecordingServer tool(
      [](const RecordedRequest&) { return http_response(200, "application/json", "{}"); });
  auto pipeline = agent_pipeline(http_tool(tool.url(), ", roles: [meteorologist]"));
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, [](Request& request) { request.identity.roles = {"staff"}; });
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"end:no_tools"}));
  EXPECT_EQ(request->messages.size(), 1u);
  EXPECT_TRUE(tool.requests().empty());

  ask(*pipeline, [](Request& request) { request.identity.roles = {"meteorologist"}; });
  EXPECT_EQ(tool.requests().size(), 1u) << "the role lets the caller use it";
}

// offer: all shows every tool; a call the caller's roles forbid is then denied, never run.
TEST(Agent, WithOfferAllACallTheRolesForbidIsDeniedAndNeverRun) {
  RecordingServer tool(
      [](const RecordedRequest&) { return http_response(200, "application/json", "{}"); });
  auto pipeline =
      agent_pipeline(http_tool(tool.url(), ", roles: [meteorologist]"), "offer: all\nmax_steps: 1");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"get_weather:denied", "end:step_limit"}));
  EXPECT_TRUE(tool.requests().empty());
  ASSERT_EQ(request->messages.size(), 3u);
  EXPECT_TRUE(contains(request->messages[2].content,
                       "error: the caller is not allowed to use 'get_weather'"))
      << request->messages[2].content;
}

TEST(Agent, TheLoopGoesOnWhileStepsCallToolsUpToMaxSteps) {
  auto pipeline = agent_pipeline(kSearchTool, "later_steps: required\nmax_steps: 3");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request),
            (std::vector<std::string>{"search:ok", "search:ok", "search:ok", "end:step_limit"}));
  ASSERT_EQ(request->messages.size(), 7u);
  for (size_t i = 1; i < 7; i += 2) {
    EXPECT_EQ(request->messages[i].role, "assistant");
    EXPECT_EQ(request->messages[i + 1].role, "tool");
    EXPECT_EQ(request->messages[i + 1].tool_call_id, request->messages[i].tool_calls.at(0).id);
  }
}

TEST(Agent, MaxToolCallsSkipsACallPastIt) {
  auto pipeline =
      agent_pipeline(kSearchTool, "later_steps: required\nmax_steps: 3\nmax_tool_calls: 1");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request),
            (std::vector<std::string>{"search:ok", "search:skipped", "end:call_limit"}));
  EXPECT_TRUE(contains(request->agent_steps[1].detail, "max_tool_calls"))
      << request->agent_steps[1].detail;
}

TEST(Agent, ATokenBudgetSmallerThanTheFirstStepRunsNoStep) {
  auto pipeline = agent_pipeline(kSearchTool, "token_budget: 50");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"end:budget_exhausted"}));
  EXPECT_EQ(request->messages.size(), 1u);
  EXPECT_EQ(request->aside_usage.total(), 0);
}

// A gate in front (a quota) holds each step before it runs; one it cannot hold is never run.
TEST(Agent, AStepTheCallersLimitsCannotHoldIsNeverRun) {
  auto pipeline = agent_pipeline(kSearchTool);
  ASSERT_TRUE(pipeline);
  auto asked = std::make_shared<std::atomic<int>>(0);
  auto request = ask(*pipeline, [asked](Request& request) {
    request.generation.max_tokens = 8;
    request.on_reserve([asked](int64_t) {
      ++*asked;
      return false;
    });
  });
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"end:limit_reached"}));
  EXPECT_GE(asked->load(), 1);
  EXPECT_EQ(request->messages.size(), 1u);
  EXPECT_EQ(request->aside_usage.total(), 0);
}

TEST(Agent, AScreenListThatBlocksWithholdsTheResultFromTheModel) {
  std::string list = write_temp_file("agent-leave-words.txt", "annual leave\n");
  auto pipeline = agent_pipeline(kSearchTool, "max_steps: 1\nscreen: {\"" + list + "\": block}");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"search:blocked", "end:step_limit"}));
  ASSERT_EQ(request->messages.size(), 3u);
  const std::string& result = request->messages[2].content;
  EXPECT_FALSE(contains(result, "25 days")) << result;
  EXPECT_TRUE(contains(result,
                       "[withheld: the result matched the content filter list "
                       "'agent-leave-words']"))
      << result;
  EXPECT_EQ(request->annotation("moderation"), "flagged:tool:agent-leave-words");
}

TEST(Agent, ARequestBringingItsOwnToolsIsA400) {
  auto pipeline = agent_pipeline(kSearchTool);
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, [](Request& request) {
    request.generation.tools.push_back({"delete_everything", "", "", false});
  });
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 400);
  EXPECT_EQ(request->error()->code, "unsupported_parameter");
  EXPECT_EQ(request->error()->param, "tools");
}

// The model stages answer the conversation the loop made (the tool's result in it, fenced), with
// no tools offered any more; the steps' tokens are charged aside, not as the answer's.
TEST(Agent, TheFinalAnswerIsWrittenOnTheLongerConversationWithoutTools) {
  auto pipeline =
      agent_pipeline(kSearchTool, "max_steps: 1",
                     "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
                     "  - {name: prefill, type: prefill, config: {model: llm}}\n"
                     "  - {name: decode, type: decode, config: {model: llm}}\n"
                     "  - {name: detokenize, type: detokenize, config: {model: llm}}\n");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, [](Request& request) {
    request.generation.max_tokens = 4;
    request.generation.ignore_eos = true;
  });
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(request->finish_reason(), FinishReason::length);
  EXPECT_EQ(request->usage.completion_tokens, 4);
  auto model = std::static_pointer_cast<GgufModel>(pipeline->resource("llm"));
  std::vector<engine::TokenId> ids(request->prompt_tokens.begin(), request->prompt_tokens.end());
  std::string prompt = model->tokenizer().decode(ids);
  EXPECT_TRUE(contains(prompt, retrieval::kToolResultBegin)) << prompt;
  EXPECT_TRUE(contains(prompt, "Every employee has 25 days of annual leave.")) << prompt;
  EXPECT_FALSE(contains(prompt, "You can call functions")) << "tools offered to the answer";
  EXPECT_GT(request->aside_usage.prompt_tokens, 0);
  EXPECT_GT(request->aside_usage.completion_tokens, 0);
}

std::string build_errors(const std::string& tools) {
  Diagnostics diagnostics;
  auto spec = check_yaml(resources_yaml() +
                             "stages:\n  - name: agent\n    type: agent\n    config:\n"
                             "      model: llm\n      tools:\n" +
                             tools + kEcho,
                         builtin_registry(), diagnostics);
  if (spec) Pipeline::build(std::move(*spec), diagnostics);
  return all_errors(diagnostics);
}

TEST(Agent, EachToolNeedsExactlyOneExecutor) {
  EXPECT_EQ(build_errors("        - {name: nothing}\n"),
            "test.yaml:6:5: error: stage 'agent' (agent): tools[0] 'nothing': give exactly one "
            "executor, 'http', 'search' or 'resource'\n");
  EXPECT_EQ(build_errors("        - {name: both, search: {index: docs}, http: {url: "
                         "\"http://127.0.0.1:9/x\"}}\n"),
            "test.yaml:6:5: error: stage 'agent' (agent): tools[0] 'both': give exactly one "
            "executor, 'http', 'search' or 'resource'\n");
}

TEST(Agent, ToolNamesAreFunctionNamesAndUnique) {
  EXPECT_EQ(build_errors("        - {name: \"look up\", search: {index: docs}}\n"),
            "test.yaml:6:5: error: stage 'agent' (agent): tools[0] 'look up': a tool name is 1 "
            "to 64 letters, digits, '_' or '-'\n");
  EXPECT_EQ(build_errors("        - {name: search, search: {index: docs}}\n"
                         "        - {name: search, search: {index: docs}}\n"),
            "test.yaml:6:5: error: stage 'agent' (agent): tools[1]: a second tool named "
            "'search'\n");
}

TEST(Agent, ASearchToolsIndexMustBeARetrievalIndexAtItsPlace) {
  std::string errors = build_errors("        - {name: search, search: {index: llm}}\n");
  EXPECT_EQ(errors.rfind("test.yaml:11:42: error: stage 'agent' (agent): key 'tools[0].search."
                         "index' needs a resource of type retrieval_index, but 'llm' is",
                         0),
            0u)
      << errors;
}

TEST(Agent, ParametersTheGrammarCannotEnforceAreRefusedNamingTheKeyword) {
  std::string errors = build_errors(
      "        - {name: search, search: {index: docs}, parameters: {type: object, properties: "
      "{days: {type: array, uniqueItems: true}}}}\n");
  EXPECT_TRUE(contains(errors,
                       "test.yaml:6:5: error: stage 'agent' (agent): tools[0] 'search': "
                       "'parameters' uses 'uniqueItems' at '/properties/days/uniqueItems', "
                       "which cannot be enforced"))
      << errors;
}

// MCP tool servers: a small stdio server in Python written here (the reference server from npm
// is driven over HTTP by tests/server/agent_mcp.test.mjs). Its tool `lookup` answers from a
// fixed table; the mode, its first argument, makes it fail in one way.
const char* const kMcpServer = R"PY(
import json, sys, time
mode = sys.argv[1]
if mode == "exit":
    sys.stderr.write("cannot open the knowledge base\n")
    sys.exit(2)
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": ident, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
              "serverInfo": {"name": "kb", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [
            {"name": "lookup", "description": "Looks a topic up.", "inputSchema": {"type": "object",
             "properties": {"topic": {"type": "string", "enum": ["leave", "travel"]}}, "required": ["topic"],
             "additionalProperties": False}},
            {"name": "unused", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        topic = message["params"]["arguments"]["topic"]
        if mode == "hang":
            continue
        if mode == "error":
            send({"jsonrpc": "2.0", "id": ident, "result": {"isError": True,
                  "content": [{"type": "text", "text": "the index is rebuilding"}]}})
            continue
        text = {"leave": "Every employee has 25 days of annual leave.", "travel": "Book trains."}[topic]
        send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "(" + topic + ") " + text}]}})
)PY";

std::string mcp_server(const std::string& mode, const std::string& extra = "") {
  static const std::string script = write_temp_file("agent_mcp_server.py", kMcpServer);
  return "        - {name: kb, command: python3, args: [\"-u\", \"" + script + "\", " + mode +
         "], tools: [lookup]" + extra + "}\n";
}

std::unique_ptr<Pipeline> mcp_pipeline(const std::string& servers,
                                       const std::string& settings = "") {
  return build_yaml(resources_yaml() +
                        "stages:\n  - name: agent\n    type: agent\n    config:\n"
                        "      model: llm\n      first_step: required\n      max_steps: 1\n"
                        "      parallel_tool_calls: false\n      step_max_tokens: 96\n" +
                        settings + "      mcp_servers:\n" + servers + kEcho,
                    builtin_registry());
}

TEST(AgentMcp, AServersToolIsOfferedPrefixedCalledAndItsTextFenced) {
  auto pipeline = mcp_pipeline(mcp_server("ok"));
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"kb_lookup:ok", "end:step_limit"}));
  std::string topic(
      json::parse(request->agent_steps[0].arguments).as_object().at("topic").as_string());
  ASSERT_EQ(request->messages.size(), 3u);
  EXPECT_EQ(request->messages[1].tool_calls.at(0).name, "kb_lookup");
  const std::string& result = request->messages[2].content;
  EXPECT_EQ(result.rfind(retrieval::kToolResultBegin, 0), 0u) << result;
  EXPECT_TRUE(contains(result, "(" + topic + ") ")) << result;
}

TEST(AgentMcp, WithoutPrefixTheServersOwnNameIsOffered) {
  auto pipeline = mcp_pipeline(mcp_server("ok", ", prefix: false"));
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"lookup:ok", "end:step_limit"}));
}

TEST(AgentMcp, IsErrorIsAnErrorStepWithTheServersText) {
  auto pipeline = mcp_pipeline(mcp_server("error"));
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"kb_lookup:error", "end:step_limit"}));
  EXPECT_TRUE(contains(request->messages.at(2).content, "error (error): the index is rebuilding"))
      << request->messages.at(2).content;
}

// The server never answers the call: the call times out at the server's timeout_s, the request
// goes on and is answered.
TEST(AgentMcp, AHangingCallTimesOutAtTheServersTimeout) {
  auto pipeline = mcp_pipeline(mcp_server("hang", ", timeout_s: 0.3"));
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"kb_lookup:timeout", "end:step_limit"}));
  EXPECT_TRUE(contains(request->agent_steps[0].detail,
                       "MCP server 'kb' gave no answer before the deadline (tools/call)"))
      << request->agent_steps[0].detail;
}

// A server that cannot start offers nothing: the trace names it and why, and the request goes
// on without tools.
TEST(AgentMcp, AServerThatExitsIsAnErrorStepNamingItAndTheRequestGoesOn) {
  auto pipeline = mcp_pipeline(mcp_server("exit"));
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"mcp:kb:error", "end:no_tools"}));
  EXPECT_TRUE(contains(request->agent_steps[0].detail, "MCP server 'kb' exited with status 2"))
      << request->agent_steps[0].detail;
  EXPECT_TRUE(contains(request->agent_steps[0].detail, "cannot open the knowledge base"))
      << request->agent_steps[0].detail;
  EXPECT_EQ(request->messages.size(), 1u);
}

TEST(AgentMcp, ACallerWithoutTheServersRoleIsOfferedNothingAndNothingStarts) {
  auto pipeline = mcp_pipeline(mcp_server("exit", ", roles: [librarian]"));
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, [](Request& request) { request.identity.roles = {"staff"}; });
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"end:no_tools"}));
}

TEST(AgentMcp, TheScreenListsApplyToItsResults) {
  std::string list = write_temp_file("agent-mcp-words.txt", "annual leave\nbook trains\n");
  auto pipeline = mcp_pipeline(mcp_server("ok"), "      screen: {\"" + list + "\": block}\n");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline);
  EXPECT_EQ(statuses(*request), (std::vector<std::string>{"kb_lookup:blocked", "end:step_limit"}));
  EXPECT_FALSE(contains(request->messages.at(2).content, "Every employee"));
}

std::string mcp_build_errors(const std::string& servers) {
  Diagnostics diagnostics;
  auto spec = check_yaml(resources_yaml() +
                             "stages:\n  - name: agent\n    type: agent\n    config:\n"
                             "      model: llm\n      mcp_servers:\n" +
                             servers + kEcho,
                         builtin_registry(), diagnostics);
  if (spec) Pipeline::build(std::move(*spec), diagnostics);
  return all_errors(diagnostics);
}

TEST(AgentMcp, AServerNeedsACommandOrAUrlNotBoth) {
  EXPECT_EQ(mcp_build_errors("        - {name: kb}\n"),
            "test.yaml:6:5: error: stage 'agent' (agent): mcp_servers[0] 'kb': give either "
            "'command' (stdio) or 'url' (Streamable HTTP)\n");
  EXPECT_EQ(mcp_build_errors("        - {name: kb, command: x, url: \"http://127.0.0.1:9/mcp\"}\n"),
            "test.yaml:6:5: error: stage 'agent' (agent): mcp_servers[0] 'kb': give either "
            "'command' (stdio) or 'url' (Streamable HTTP)\n");
  EXPECT_EQ(mcp_build_errors("        - {name: kb, url: \"ftp://x/mcp\"}\n"),
            "test.yaml:6:5: error: stage 'agent' (agent): mcp_servers[0] 'kb': 'url' 'ftp://x/mcp' "
            "is not an http:// or https:// URL\n");
  EXPECT_EQ(mcp_build_errors("        - {name: kb, command: x, headers: {a: b}}\n"),
            "test.yaml:6:5: error: stage 'agent' (agent): mcp_servers[0] 'kb': 'headers' and "
            "'ca_file' are for a 'url' server, not a 'command'\n");
}

TEST(AgentMcp, ServerKeysAreCheckedWhereTheyAreWritten) {
  EXPECT_EQ(mcp_build_errors("        - {name: kb, command: x, timeout_s: fast}\n"),
            "test.yaml:11:45: error: stage 'agent' (agent): key 'mcp_servers[0].timeout_s' "
            "expects a number, got \"fast\"\n");
  EXPECT_EQ(
      mcp_build_errors("        - {name: kb, command: x}\n        - {name: kb, command: y}\n"),
      "test.yaml:6:5: error: stage 'agent' (agent): mcp_servers[1]: a second server named "
      "'kb'\n");
}

}  // namespace
}  // namespace chatflow::testing
