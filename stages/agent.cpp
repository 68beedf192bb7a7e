// agent: lets the model use the pipeline's own tools before it answers. Each step asks the
// model (aside, with the tools the caller may use) for its next move; the calls it proposes are
// checked (a declared tool the caller's roles allow, arguments valid against the tool's JSON
// Schema), run with a timeout, screened, fenced as untrusted data and appended as tool messages;
// then the model is asked again. The loop ends when the model answers without calls or a bound
// is reached (max_steps, max_tool_calls, timeout_s, token_budget); the request then goes on with
// the longer conversation, and the pipeline's own model stages write the final answer (tools no
// longer offered), so it streams like any other. Executors: an HTTP endpoint, the retrieval
// index (`search`), or a plugin's tool type (`resource`, framework/api/tool_executor.h). The
// loop runs on a thread of its own: tool calls wait on the network, which must not hold one of
// the graph's few worker threads.
//
// Tool results are data, never authority: they reach the model only inside a tool message's
// fence, cannot add tools (the offered set is fixed before the first step) or change what the
// caller may call, and matches of the `screen` rule lists flag or withhold them.
#include <thread>

#include <boost/json.hpp>

#include "framework/chat/tool_calls.h"
#include "framework/grammar/matcher.h"
#include "framework/retrieval/prompt_assembly.h"
#include "framework/text/normalizer.h"
#include "stages/agent_mcp.h"
#include "stages/agent_tools.h"
#include "stages/gguf_model.h"
#include "stages/moderation_lists.h"

namespace chatflow {
namespace {
namespace json = boost::json;

struct AgentToolConfig {
  std::string name;
  std::string description;
  ConfigValue parameters;  // a JSON Schema written in YAML
  std::vector<std::string> roles;
  HttpToolConfig http;
  SearchToolConfig search;
  std::string resource;  // a tool executor resource (a plugin's tool type)
};

struct AgentConfig {
  std::string model;
  std::vector<AgentToolConfig> tools;
  std::vector<McpServerConfig> mcp_servers;
  int64_t max_steps = 4;
  int64_t max_tool_calls = 8;
  double timeout_s = 30;
  int64_t token_budget = 4096;
  int64_t step_max_tokens = 256;
  std::string first_step = "auto";
  std::string later_steps = "auto";
  bool parallel_tool_calls = true;
  std::string offer = "permitted";
  std::map<std::string, std::string> screen;
  int64_t max_result_chars = 4000;
};

// YAML's plain scalars typed as the core schema reads them; quoted ones stay strings.
json::value to_json(const ConfigValue& value) {
  switch (value.kind) {
    case ConfigValue::Kind::null:
      return nullptr;
    case ConfigValue::Kind::sequence: {
      json::array items;
      for (const auto& item : value.items)
        items.push_back(to_json(item));
      return items;
    }
    case ConfigValue::Kind::mapping: {
      json::object members;
      for (size_t i = 0; i < value.keys.size(); ++i)
        members[value.keys[i].name] = to_json(value.items[i]);
      return members;
    }
    case ConfigValue::Kind::scalar:
      break;
  }
  const std::string& text = value.text;
  if (value.quoted) return json::string(text);
  if (text == "true" || text == "false") return text == "true";
  if (text == "null" || text == "~" || text.empty()) return nullptr;
  const char* end = text.data() + text.size();
  int64_t integer = 0;
  if (auto [at, error] = std::from_chars(text.data(), end, integer);
      error == std::errc() && at == end) {
    return integer;
  }
  double number = 0;
  if (auto [at, error] = std::from_chars(text.data(), end, number);
      error == std::errc() && at == end) {
    return number;
  }
  return json::string(text);
}

// A tool's declaration as the loop uses it; a ConfigError names the tool and what is wrong.
AgentTool make_tool(const AgentToolConfig& config, size_t index, StageContext& context) {
  std::string where = "tools[" + std::to_string(index) + "] '" + config.name + "': ";
  if (!chat::valid_function_name(config.name))
    throw ConfigError(where + "a tool name is 1 to 64 letters, digits, '_' or '-'");
  bool http = !config.http.url.empty();
  bool search = !config.search.index.empty();
  bool resource = !config.resource.empty();
  if (int(http) + int(search) + int(resource) != 1)
    throw ConfigError(where + "give exactly one executor, 'http', 'search' or 'resource'");
  AgentTool tool;
  tool.definition.name = config.name;
  tool.definition.description = config.description;
  tool.roles = config.roles;
  json::value schema = config.parameters.is_null()
                           ? (search ? json::parse(kSearchParameters)
                                     : json::value(json::object{{"type", "object"}}))
                           : to_json(config.parameters);
  if (!schema.is_object())
    throw ConfigError(where + "'parameters' must be a JSON Schema mapping (type: object, ...)");
  try {
    tool.arguments = grammar::compile_json_schema(schema);
  } catch (const grammar::SchemaError& error) {
    std::string at = error.pointer().empty() ? "" : " at '" + error.pointer() + "'";
    throw ConfigError(where + "'parameters' uses '" + error.keyword() + "'" + at +
                      ", which cannot be enforced: " + error.what());
  }
  tool.definition.parameters = json::serialize(schema);
  try {
    if (http) {
      tool.executor = make_http_tool(config.http);
    } else if (search) {
      tool.executor = make_search_tool(
          context.resource<RetrievalIndexResource>(config.search.index), config.search);
    } else {
      tool.executor = context.resource<ToolExecutorResource>(config.resource);
    }
  } catch (const ConfigError& error) {
    throw ConfigError(where + error.what());
  }
  return tool;
}

// The loop, shared by the stage and the threads running it (which may outlive the stage).
class AgentLoop {
 public:
  AgentLoop(AgentConfig config, std::shared_ptr<GgufModel> model, std::vector<AgentTool> tools,
            std::vector<std::shared_ptr<McpToolServer>> servers, std::vector<ActionList> screen)
      : config_(std::move(config)),
        model_(std::move(model)),
        tools_(std::move(tools)),
        servers_(std::move(servers)),
        screen_(std::move(screen)) {}

  // Whether the caller may be offered a tool: one of the pipeline's own, or an MCP server's
  // (whose tools are known only once it is asked).
  bool may_offer(const Identity& identity) const {
    for (const auto& tool : tools_)
      if (config_.offer == "all" || tool.permits(identity)) return true;
    for (const auto& server : servers_)
      if (config_.offer == "all" || server->permits(identity)) return true;
    return false;
  }

  // A caller whose roles allow no tool: no step runs, and the trace says why.
  void skip(Request& request) const {
    LoopState state;
    state.started = Clock::now();
    finish(request, state, 0, "no_tools");
  }

  // On the loop's own thread: runs the steps, then sends the request on (or fails it).
  void run(Continuation continuation) const {
    Request& request = continuation.request();
    try {
      run_steps(request);
    } catch (const RequestFailure& failure) {
      continuation.fail(failure.error());
      return;
    } catch (const std::exception& error) {
      // A cancelled request has its answer already; nothing is left to tell.
      if (request.cancelled()) return;
      continuation.fail(RequestError{500,
                                     "server_error",
                                     std::string("the agent's step failed: ") + error.what(),
                                     "agent_failed",
                                     {}});
      return;
    }
    continuation.resume(0);
  }

 private:
  struct LoopState {
    Clock::time_point started;
    Clock::time_point deadline;
    Usage spent;
    // The final answer's prompt as it stands (the conversation with the steps kept so far), and
    // what the caller's limits hold for the answer: that prompt and the answer's bound, as the
    // gates reserved them for the conversation as it came and the steps grew them.
    int64_t answer_prompt = 0;
    int64_t answer_held = 0;
    int calls_run = 0;
    // The tools of this request: the pipeline's own, then those its MCP servers listed (kept
    // alive here, as a server may list others meanwhile).
    std::vector<const AgentTool*> declared;
    std::vector<std::shared_ptr<const std::vector<AgentTool>>> listed;
    std::vector<AgentStep> trace;
    std::vector<std::string> flagged;
  };

  void run_steps(Request& request) const {
    LoopState state;
    state.started = Clock::now();
    state.deadline = std::min(
        request.deadline, state.started + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(config_.timeout_s)));
    state.answer_prompt = static_cast<int64_t>(model_->encode_prompt(request, true).size());
    state.answer_held =
        state.answer_prompt + model_->answer_token_limit(request.generation, state.answer_prompt);
    declare_tools(request, state);
    std::vector<const AgentTool*> offered;
    for (const AgentTool* tool : state.declared)
      if (config_.offer == "all" || tool->permits(request.identity)) offered.push_back(tool);
    if (offered.empty()) {
      finish(request, state, 0, "no_tools");
      return;
    }
    std::string end = "step_limit";
    int step = 1;
    for (; step <= config_.max_steps; ++step) {
      std::optional<std::string> stop = run_step(request, offered, step, state);
      if (stop) {
        end = *stop;
        break;
      }
    }
    finish(request, state, std::min<int>(step, static_cast<int>(config_.max_steps)), end);
  }

  // The pipeline's own tools, then each MCP server's the caller may use (listed on first use):
  // a server that cannot list them is an error step naming it, and its tools are not offered.
  // A listed name the pipeline already has is left out.
  void declare_tools(const Request& request, LoopState& state) const {
    for (const auto& tool : tools_)
      state.declared.push_back(&tool);
    for (const auto& server : servers_) {
      if (config_.offer != "all" && !server->permits(request.identity)) continue;
      auto began = Clock::now();
      McpToolServer::Offer offer =
          server->discover(state.deadline, [&request] { return request.cancelled(); });
      if (!offer.tools) {
        AgentStep entry;
        entry.tool = "mcp:" + server->name();
        entry.declared = true;
        entry.status = offer.status;
        entry.detail = offer.error;
        entry.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - began).count();
        state.trace.push_back(std::move(entry));
        continue;
      }
      state.listed.push_back(offer.tools);
      for (const AgentTool& tool : *offer.tools) {
        bool taken = std::any_of(
            state.declared.begin(), state.declared.end(),
            [&](const AgentTool* other) { return other->definition.name == tool.definition.name; });
        if (!taken) state.declared.push_back(&tool);
      }
    }
  }

  // One model call and the calls it proposes; the reason to stop, or nullopt to go on.
  std::optional<std::string> run_step(Request& request,
                                      const std::vector<const AgentTool*>& offered, int step,
                                      LoopState& state) const {
    if (Clock::now() >= state.deadline) return "timeout";
    Request probe;
    probe.id = request.id;
    probe.kind = RequestKind::chat;
    probe.identity = request.identity;
    probe.model = request.model;
    probe.messages = request.messages;
    probe.chat_template_kwargs = request.chat_template_kwargs;
    probe.generation = request.generation;
    probe.generation.stop.clear();  // a stop string must not cut a call short
    probe.generation.ignore_eos = false;
    probe.generation.logprobs = false;
    probe.generation.top_logprobs = 0;
    probe.generation.response_format = {};  // the shape of the final answer, not of a step
    probe.generation.answer_token_cap = 0;  // the final answer's; a step is held on its own
    probe.generation.parallel_tool_calls = config_.parallel_tool_calls;
    for (const AgentTool* tool : offered)
      probe.generation.tools.push_back(tool->definition);
    const std::string& choice = step == 1 ? config_.first_step : config_.later_steps;
    probe.generation.tool_choice =
        choice == "required" ? ToolChoice::required : ToolChoice::automatic;
    // The budget covers the step's prompt and its answer, so it is checked before the call.
    int64_t left = config_.token_budget - state.spent.total();
    PromptFacts facts;
    std::vector<int32_t> prompt = model_->encode_prompt(probe, true, &facts);
    auto prompt_tokens = static_cast<int64_t>(prompt.size());
    if (prompt_tokens + 1 > left) return "budget_exhausted";
    probe.generation.max_tokens = std::min(config_.step_max_tokens, left - prompt_tokens);
    bool budget_bound = probe.generation.max_tokens < config_.step_max_tokens;
    // The caller's quota and tokens-per-minute limits hold the step before it runs (they
    // reserved only the answer), or an answer without max_tokens lends it of what they granted.
    std::optional<int64_t> lent =
        hold_for_step(request, prompt_tokens + probe.generation.max_tokens, state);
    if (!lent) return "limit_reached";

    GgufModel::AsideAnswer answer;
    try {
      answer = model_->answer_aside(probe, std::move(prompt), facts, [&request, &state] {
        return request.cancelled() || Clock::now() >= state.deadline;
      });
    } catch (const RequestFailure& failure) {
      // The tools' description or results filled the context: the answer, which shows no
      // tools, may still fit.
      if (failure.error().code == "context_length_exceeded") return "context_full";
      throw;
    } catch (const std::exception&) {
      if (!request.cancelled() && Clock::now() >= state.deadline) return "timeout";
      throw;
    }
    state.spent += answer.usage;
    give_back(request, *lent - answer.usage.total(), state);
    chat::ParsedToolCalls parsed =
        chat::parse_tool_calls(answer.text, answer.tool_format, probe.generation.tools);
    if (parsed.calls.empty()) {
      if (!answer.cut_at_length) return "answered";
      return budget_bound ? "budget_exhausted" : "step_max_tokens";
    }

    Message assistant{"assistant", parsed.content, std::move(parsed.calls), {}};
    std::vector<Message> results;
    std::optional<std::string> stop;
    for (auto& call : assistant.tool_calls) {
      if (call.id.empty()) call.id = chat::new_tool_call_id(answer.tool_format);
      AgentStep entry;
      entry.step = step;
      entry.tool = call.name;
      entry.call_id = call.id;
      entry.arguments = call.arguments;
      if (state.calls_run >= config_.max_tool_calls || Clock::now() >= state.deadline) {
        stop = state.calls_run >= config_.max_tool_calls ? "call_limit" : "timeout";
        entry.status = "skipped";
        entry.detail = "not run: the agent's " +
                       std::string(*stop == "call_limit" ? "max_tool_calls" : "timeout_s") +
                       " was reached";
      } else {
        ++state.calls_run;
        run_call(request, call, entry, state);
      }
      results.push_back(Message{"tool", entry.detail, {}, call.id});
      state.trace.push_back(std::move(entry));
    }
    size_t before = request.messages.size();
    request.messages.push_back(std::move(assistant));
    for (auto& result : results)
      request.messages.push_back(std::move(result));
    // The answer must still fit the context, and the caller's limits must hold the prompt the
    // step added to it (the answer runs on the whole transcript, and the gates reserved only the
    // conversation as it came): a step whose results would pass either is left out of the
    // conversation (its calls ran, the trace says so) and the loop ends.
    auto answer_prompt = static_cast<int64_t>(model_->encode_prompt(request, true).size());
    auto leave_out = [&](const char* why) {
      request.messages.erase(request.messages.begin() + static_cast<std::ptrdiff_t>(before),
                             request.messages.end());
      return std::optional<std::string>(why);
    };
    if (answer_prompt + model_->answer_token_limit(request.generation, answer_prompt) >
        model_->context_length()) {
      return leave_out("context_full");
    }
    if (!hold_answer(request, answer_prompt, state)) return leave_out("limit_reached");
    return stop;
  }

  // The caller's limits hold the final answer on a prompt of `answer_prompt` tokens: what they
  // hold already, else more asked of them; an answer without max_tokens, which the gates capped
  // at what they could grant, is held to what they hold instead (the longer prompt shortens it).
  // False when neither can.
  bool hold_answer(Request& request, int64_t answer_prompt, LoopState& state) const {
    int64_t needed = answer_prompt + model_->answer_token_limit(request.generation, answer_prompt);
    if (needed > state.answer_held) {
      if (request.reserve_aside(needed - state.answer_held)) {
        state.answer_held = needed;
      } else if (!lower_cap(request, state.answer_held - answer_prompt, answer_prompt)) {
        return false;
      }
    }
    state.answer_prompt = answer_prompt;
    return true;
  }

  // `tokens` held for a step: by the caller's limits (0 lent), or lent by an answer without
  // max_tokens out of what the gates hold for it (its cap lowered); nullopt when neither can.
  std::optional<int64_t> hold_for_step(Request& request, int64_t tokens, LoopState& state) const {
    if (request.reserve_aside(tokens)) return 0;
    if (!lower_cap(request, state.answer_held - tokens - state.answer_prompt, state.answer_prompt))
      return std::nullopt;
    state.answer_held -= tokens;
    return tokens;
  }

  // What a step did not use of what the answer lent it goes back to the answer.
  void give_back(Request& request, int64_t tokens, LoopState& state) const {
    if (tokens <= 0) return;
    state.answer_held += tokens;
    request.generation.answer_token_cap = state.answer_held - state.answer_prompt;
  }

  // Lowers the cap of an answer without max_tokens (one a gate capped) to `cap`, when that
  // leaves it at least what a gate grants at least.
  bool lower_cap(Request& request, int64_t cap, int64_t answer_prompt) const {
    GenerationParams& generation = request.generation;
    if (generation.max_tokens > 0 || generation.answer_token_cap <= 0) return false;
    int64_t least = std::min(model_->answer_token_limit(generation, answer_prompt),
                             kMinimumGrantedAnswerTokens);
    if (cap < least) return false;
    generation.answer_token_cap = std::min(generation.answer_token_cap, cap);
    return true;
  }

  // Checks and runs one call; `entry` gets its outcome and what the model will read.
  void run_call(const Request& request, const ToolCall& call, AgentStep& entry,
                LoopState& state) const {
    auto began = Clock::now();
    const AgentTool* tool = nullptr;
    for (const AgentTool* declared : state.declared)
      if (declared->definition.name == call.name) tool = declared;
    entry.declared = tool != nullptr;
    std::string result;
    if (tool == nullptr || !tool->permits(request.identity)) {
      entry.status = "denied";
      result = tool == nullptr ? "error: there is no tool named '" + call.name + "'"
                               : "error: the caller is not allowed to use '" + call.name + "'";
    } else if (!arguments_valid(*tool, call.arguments)) {
      entry.status = "invalid_arguments";
      result = "error: the arguments do not match the parameters schema of '" + call.name + "'";
    } else {
      ToolCallContext context{&request.identity, request.id, state.deadline,
                              [&request] { return request.cancelled(); }};
      ToolOutcome outcome = tool->executor->call(call.arguments, context);
      entry.status = outcome.status;
      entry.attempts = outcome.attempts;
      result = outcome.status == "ok" ? outcome.content
                                      : "error (" + outcome.status + "): " + outcome.content;
      screen(result, entry, state);
    }
    entry.detail = retrieval::tool_result_block(call.name, result,
                                                static_cast<size_t>(config_.max_result_chars));
    entry.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - began).count();
  }

  // The arguments as the tool's schema allows them (the grammar reads JSON in a canonical
  // shape, so the model's text is re-serialised first).
  static bool arguments_valid(const AgentTool& tool, const std::string& arguments) {
    json::error_code error;
    json::value parsed = json::parse(arguments, error);
    if (error) return false;
    grammar::Matcher matcher(tool.arguments);
    return matcher.advance(json::serialize(parsed)) && matcher.accepting();
  }

  // The screen lists over a result: `flag` notes it, `block` withholds it from the model.
  void screen(std::string& result, AgentStep& entry, LoopState& state) const {
    if (screen_.empty()) return;
    std::string normalized = text::normalize(result).text;
    for (const auto& [list, action] : screen_) {
      if (!list->matches(normalized)) continue;
      entry.flags.push_back(list->name());
      state.flagged.push_back("tool:" + list->name());
      if (action == "block") {
        entry.status = "blocked";
        result = "[withheld: the result matched the content filter list '" + list->name() + "']";
        return;
      }
    }
  }

  void finish(Request& request, LoopState& state, int steps, const std::string& end) const {
    AgentStep last;
    last.step = steps;
    last.status = end;
    last.usage = state.spent;
    last.duration_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - state.started).count();
    std::string summary;
    for (const auto& entry : state.trace)
      summary += (summary.empty() ? "" : ",") + (entry.declared ? entry.tool : "undeclared") + ":" +
                 entry.status;  // a name the model made up never reaches a metrics label
    state.trace.push_back(std::move(last));
    request.agent_steps = std::move(state.trace);
    request.aside_usage += state.spent;
    request.annotate("agent", end);
    if (!summary.empty()) request.annotate("agent_steps", summary);
    if (!state.flagged.empty()) {
      std::string value = request.annotation("moderation").value_or("flagged:");
      for (const auto& name : state.flagged)
        value += (value.back() == ':' ? "" : ",") + name;
      request.annotate("moderation", value);
    }
  }

  AgentConfig config_;
  std::shared_ptr<GgufModel> model_;
  std::vector<AgentTool> tools_;
  std::vector<std::shared_ptr<McpToolServer>> servers_;
  std::vector<ActionList> screen_;
};

class AgentStage final : public RequestStage {
 public:
  AgentStage(std::string name, std::shared_ptr<const AgentLoop> loop)
      : name_(std::move(name)), loop_(std::move(loop)) {}

  Route process(Request& request, StageIo& io) override {
    if (request.kind != RequestKind::chat) return Route::to(0);
    if (!request.generation.tools.empty()) {
      throw RequestFailure(
          RequestError{400, "invalid_request_error",
                       "'tools' cannot be sent to this pipeline: its agent stage '" + name_ +
                           "' offers the pipeline's own tools and runs them itself",
                       "unsupported_parameter", "tools"});
    }
    if (!loop_->may_offer(request.identity)) {
      loop_->skip(request);
      return Route::to(0);
    }
    auto loop = loop_;
    std::thread([loop, continuation = io.defer()]() mutable {
      loop->run(std::move(continuation));
    }).detach();
    return Route::deferred();
  }

 private:
  std::string name_;
  std::shared_ptr<const AgentLoop> loop_;
};

SchemaBuilder<AgentToolConfig> tool_schema() {
  SchemaBuilder<HttpToolConfig> http;
  http.key("url", &HttpToolConfig::url,
           "http(s)://host:port/path the arguments are POSTed to (https: verified)")
      .required();
  http.key("ca_file", &HttpToolConfig::ca_file,
           "https: PEM file of the CAs trusted; empty: the system's trust store");
  http.key("timeout_s", &HttpToolConfig::timeout_s, "each attempt's time limit").range(0.001, 3600);
  http.key("retries", &HttpToolConfig::retries,
           "attempts after a failure (connection, 5xx, timeout), only when idempotent")
      .range(0, 10);
  http.key("idempotent", &HttpToolConfig::idempotent,
           "running a call twice is harmless (every attempt carries the same Idempotency-Key)");
  http.key("max_response_bytes", &HttpToolConfig::max_response_bytes, "a longer answer is an error")
      .range(1, 16 << 20);
  SchemaBuilder<SearchToolConfig> search;
  search.key("index", &SearchToolConfig::index, "the retrieval_index resource searched")
      .required()
      .resource("retrieval_index");
  search.key("top_k", &SearchToolConfig::top_k, "passages returned").range(1, 50);

  SchemaBuilder<AgentToolConfig> tool;
  tool.key("name", &AgentToolConfig::name, "the function name the model calls").required();
  tool.key("description", &AgentToolConfig::description, "what the model is told it does");
  tool.key("parameters", &AgentToolConfig::parameters,
           "the arguments' JSON Schema, in YAML (default: any object; search: {query})");
  tool.key("roles", &AgentToolConfig::roles, "roles that may call it (empty: every caller)");
  tool.object("http", &AgentToolConfig::http, http, "executor: POST the arguments as JSON");
  tool.object("search", &AgentToolConfig::search, search,
              "executor: the pipeline's retrieval index, read with the caller's ACL");
  tool.key("resource", &AgentToolConfig::resource,
           "executor: a tool resource (a plugin's tool type, declared under resources:)");
  return tool;
}

StageTypeInfo agent_stage_type() {
  StageTypeBuilder<AgentConfig> type(
      "agent", StageKind::request,
      "Lets the model call the pipeline's declared tools (HTTP endpoints, the retrieval index, "
      "MCP servers) "
      "in a bounded loop before the model stages answer; results are fenced as untrusted data.");
  type.port("out", PortKind::request, "the request, its conversation extended by the tool calls");
  auto& config = type.config();
  config.key("model", &AgentConfig::model, "the gguf_model resource")
      .required()
      .resource("gguf_model");
  config.list("tools", &AgentConfig::tools, tool_schema(), "the tools the model may call");
  config.list("mcp_servers", &AgentConfig::mcp_servers, mcp_server_schema(),
              "MCP tool servers (stdio or Streamable HTTP) whose tools the model may call");
  config.key("max_steps", &AgentConfig::max_steps, "model calls that may propose tools")
      .range(1, 64);
  config.key("max_tool_calls", &AgentConfig::max_tool_calls, "tool calls run per request")
      .range(1, 256);
  config.key("timeout_s", &AgentConfig::timeout_s, "the whole loop's time limit")
      .range(0.001, 3600);
  config
      .key("token_budget", &AgentConfig::token_budget,
           "prompt + completion tokens of the agent's own steps (charged to the caller)")
      .range(1, 10'000'000);
  config.key("step_max_tokens", &AgentConfig::step_max_tokens, "tokens one step may generate")
      .range(1, 65536);
  config
      .key("first_step", &AgentConfig::first_step,
           "auto: the model may answer at once; required: its first step must call a tool")
      .choices({"auto", "required"});
  config.key("later_steps", &AgentConfig::later_steps, "the same for the steps after the first")
      .choices({"auto", "required"});
  config.key("parallel_tool_calls", &AgentConfig::parallel_tool_calls,
             "a step may propose several calls");
  config
      .key("offer", &AgentConfig::offer,
           "permitted: only tools the caller's roles allow are shown; all: every tool is shown "
           "and a call the roles forbid is denied")
      .choices({"permitted", "all"});
  config.key("screen", &AgentConfig::screen,
             "rule list file -> flag or block, over tool results (as input_moderation's lists)");
  config.key("max_result_chars", &AgentConfig::max_result_chars, "a longer result is cut")
      .range(16, 1'000'000);
  type.create([](const AgentConfig& config, StageContext& context) {
    if (config.tools.empty() && config.mcp_servers.empty())
      throw ConfigError("'tools' declares no tool and 'mcp_servers' no server");
    std::vector<AgentTool> tools;
    for (size_t i = 0; i < config.tools.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (config.tools[j].name == config.tools[i].name)
          throw ConfigError("tools[" + std::to_string(i) + "]: a second tool named '" +
                            config.tools[i].name + "'");
      }
      tools.push_back(make_tool(config.tools[i], i, context));
    }
    std::vector<std::shared_ptr<McpToolServer>> servers;
    for (size_t i = 0; i < config.mcp_servers.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (config.mcp_servers[j].name == config.mcp_servers[i].name)
          throw ConfigError("mcp_servers[" + std::to_string(i) + "]: a second server named '" +
                            config.mcp_servers[i].name + "'");
      }
      try {
        servers.push_back(std::make_shared<McpToolServer>(config.mcp_servers[i]));
      } catch (const ConfigError& error) {
        throw ConfigError("mcp_servers[" + std::to_string(i) + "] '" + config.mcp_servers[i].name +
                          "': " + error.what());
      }
    }
    auto loop = std::make_shared<const AgentLoop>(
        config, context.resource<GgufModel>(config.model), std::move(tools), std::move(servers),
        load_action_lists(config.screen, {"flag", "block"}));
    return std::make_unique<AgentStage>(context.stage_name(), std::move(loop));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(agent_stage_type);

}  // namespace
}  // namespace chatflow
