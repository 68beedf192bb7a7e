// The request is the context object that flows through a pipeline: who asks, what they ask,
// what stages have found out along the way, how it ended, and how to stop it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/api/chunk.h"
#include "framework/api/trace.h"

namespace chatflow {

class Sink;

namespace detail {
struct RequestRuntime;
class PipelineCore;
struct StageIoAccess;
}  // namespace detail

// Built as {role, content} most of the time: the constructor lets the tool fields default
// (as an aggregate, every such brace list was a -Wmissing-field-initializers warning).
struct Message {
  Message() = default;
  Message(std::string role, std::string content, std::vector<ToolCall> tool_calls = {},
          std::string tool_call_id = {})
      : role(std::move(role)),
        content(std::move(content)),
        tool_calls(std::move(tool_calls)),
        tool_call_id(std::move(tool_call_id)) {}
  std::string role;  // system, user, assistant, tool
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant: the calls it made
  std::string tool_call_id;          // tool: the call this message answers
};

// A function the caller offers the model (OpenAI's tools[i] of type "function").
struct ToolDefinition {
  std::string name;
  std::string description;
  std::string parameters;  // a JSON Schema's text; "" when the function takes none
  bool strict = false;
};

enum class ToolChoice { none, automatic, required, function };

// OpenAI's response_format: free text, any JSON object, or a value of a JSON Schema.
struct ResponseFormat {
  enum class Kind { text, json_object, json_schema } kind = Kind::text;
  std::string name;
  std::string schema;  // the JSON Schema's text (json_schema)
  bool strict = false;
};

// How the model writes a tool call, decided from its chat template (framework/openai/tool_calls.h).
enum class ToolCallFormat : uint8_t { none, hermes, llama3, mistral, generic };

// Who is calling, as established by authentication; the tenant salts shared caches.
// Who is asking, as the credential says (never the request body).
struct Identity {
  std::string tenant;
  std::string user;
  std::string key_id;  // the API key's id, when an API key was used
  std::vector<std::string> roles;
  // Limits that come with the credential (e.g. "rpm", "tpm"), over the stages' defaults.
  std::map<std::string, double> limits;

  bool has_role(std::string_view role) const;
  // Who owns what this caller keeps on the server (sessions): "user:NAME", else "key:ID" for a
  // key without a user, else empty (no credential).
  std::string owner() const;
};

// HTTP header fields as the client sent them, names in lower case.
using HeaderFields = std::vector<std::pair<std::string, std::string>>;

// What the caller asked the model for; fields and defaults follow OpenAI's API.
struct GenerationParams {
  // 0: not given: the answer may fill the model's context, as OpenAI and vLLM read it (the
  // model resource resolves it: GgufModel::answer_token_limit, upstream's max_tokens_default).
  int64_t max_tokens = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;  // 0: off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool logprobs = false;
  int top_logprobs = 0;
  bool ignore_eos = false;
  std::vector<ToolDefinition> tools;
  ToolChoice tool_choice = ToolChoice::automatic;  // none when there are no tools
  std::string tool_choice_function;                // ToolChoice::function: its name
  bool parallel_tool_calls = true;
  ResponseFormat response_format;
  // The most tokens the answer may have as the gates (rate_limit, quota) reserved it: the least
  // any of them granted; 0: no gate set one. A gate sets it for an answer without max_tokens
  // (what its bucket or allowance could hold), and every generator holds the answer to it beside
  // max_tokens or the model's own bound, ending it with finish_reason "length" there.
  int64_t answer_token_cap = 0;
};

// The answer's bound where max_tokens was not given and no context length is known: a gate
// without a model, an upstream without context_length or tokenizer.
inline constexpr int64_t kMaxTokensWithoutContext = 4096;

// The least a gate grants an answer without max_tokens (or its whole bound, when less): a gate
// that cannot grant that much refuses the request rather than admit an answer cut at once.
inline constexpr int64_t kMinimumGrantedAnswerTokens = 16;

// `bound` (max_tokens, or the model's bound for an answer without it) held to the gates' cap.
inline int64_t capped_answer_tokens(const GenerationParams& generation, int64_t bound) {
  int64_t cap = generation.answer_token_cap;
  return cap > 0 && cap < bound ? cap : bound;
}

enum class RequestKind { chat, completion };

// A failure of one request, in the shape of an OpenAI error response.
struct RequestError {
  int status = 500;     // HTTP status
  std::string type;     // "invalid_request_error", "authentication_error", ...
  std::string message;  // for the user; names the value that caused it
  std::string code;     // optional machine-readable code ("rate_limit_exceeded")
  std::string param;    // optional offending parameter
};

// Thrown by a stage to fail the request it is processing; other exceptions become a 500.
class RequestFailure : public std::runtime_error {
 public:
  explicit RequestFailure(RequestError error)
      : std::runtime_error(error.message), error_(std::move(error)) {}
  RequestFailure(int status, std::string type, std::string message, std::string code = {})
      : RequestFailure(
            RequestError{status, std::move(type), std::move(message), std::move(code), {}}) {}
  const RequestError& error() const { return error_; }

 private:
  RequestError error_;
};

// Time spent in one stage. Request stages run once; stream stages add up over the chunks.
struct StageTiming {
  int64_t first_start_ns = 0;  // steady-clock nanoseconds
  int64_t last_end_ns = 0;
  int64_t busy_ns = 0;
  uint32_t calls = 0;
  // The port the stage passed the request on through (a request port, or the stream port it
  // wrote to), as an index into its type's ports; -1 when it took none (it failed, or answered
  // nothing).
  int32_t port = -1;
};

using Clock = std::chrono::steady_clock;

// When the engine queued, first scheduled, and finished this request's generation, and when its
// first token was sampled: steady-clock nanoseconds, 0 until it happened. Written by the model
// stages on the engine thread, read for metrics once the request has finished.
struct GenerationTimes {
  std::atomic<int64_t> queued_ns{0};
  std::atomic<int64_t> scheduled_ns{0};
  std::atomic<int64_t> first_token_ns{0};
  std::atomic<int64_t> finished_ns{0};
};

// A passage a retrieval stage found for the prompt, and where it came from (for citations).
struct ContextPassage {
  std::string text;
  std::string document;
  std::string title;
  uint32_t chunk = 0;
  double score = 0;
};

// One entry of an agent's trace (stages/agent.cpp), the response's `chatflow.steps`: a tool call
// the model proposed and what became of it, or (tool empty) why the loop ended.
struct AgentStep {
  int step = 0;           // the model call, from 1, that proposed it
  std::string tool;       // as the model named it; empty for the loop's end
  bool declared = false;  // the pipeline declares a tool of that name (a bounded metrics label)
  std::string call_id;
  std::string arguments;  // as the model wrote them
  // ok, error, timeout, denied, invalid_arguments, blocked, skipped; for the end: answered,
  // step_limit, call_limit, budget_exhausted, timeout, step_max_tokens, context_full, no_tools.
  std::string status;
  std::string detail;              // what the model was told (the fenced result), or why not
  std::vector<std::string> flags;  // rule lists the result matched
  int attempts = 0;
  double duration_ms = 0;
  Usage usage;  // the end: the tokens of all the agent's model calls
};

class Request : public std::enable_shared_from_this<Request> {
 public:
  Request();
  ~Request();
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // --- What the caller asks; filled in before submit. ---
  std::string id;  // the completion's id ("chatcmpl-..."), as the response reports it
  // What names the request in logs and traces: the caller's X-Request-Id when usable, else `id`.
  std::string request_id;
  // The client's IP: the TCP peer, or the X-Forwarded-For client behind a trusted proxy.
  std::string client_address;
  Identity identity;
  std::string model;
  RequestKind kind = RequestKind::chat;
  std::vector<Message> messages;  // chat requests
  // vLLM's chat_template_kwargs: extra variables for the chat template (e.g. enable_thinking),
  // as a JSON object's text; empty when absent. Request data: never template text.
  std::string chat_template_kwargs;
  std::string prompt;      // completion requests: the raw prompt text
  std::string session_id;  // a server-side conversation (history stages), or empty
  // OpenAI's "user": the client's own label for its end user, for logs; never an identity.
  std::string end_user;
  GenerationParams generation;
  bool stream = true;
  bool include_usage = false;  // stream_options.include_usage
  int64_t created = 0;         // Unix seconds, as the response reports it
  Clock::time_point deadline = Clock::time_point::max();
  std::shared_ptr<Sink> sink;
  HeaderFields headers;  // the HTTP request's, when it came over HTTP
  // Its distributed trace when the server traces requests (null otherwise): code that calls
  // another service opens a child span there and sends its traceparent (framework/api/trace.h).
  std::shared_ptr<RequestTrace> trace;
  // Passages a retrieval stage found for the prompt (checked by input moderation as well).
  std::vector<ContextPassage> context_passages;
  // The passages the prompt cites as [1], [2]... (prompt_assembly); the response's
  // `chatflow.citations`.
  std::vector<ContextPassage> citations;

  // The value of header `name` (lower case), or nullopt.
  std::optional<std::string_view> header(std::string_view name) const;

  // --- What stages found out. ---
  Usage usage;
  // Tokens the model spent for this request outside its answer (an agent's steps): charged to
  // the caller's limits and quota beside `usage`, which stays the answer's own.
  Usage aside_usage;
  std::vector<AgentStep> agent_steps;  // the response's `chatflow.steps`
  std::vector<int32_t> prompt_tokens;  // set by the tokenize stage
  // Whether the model writes reasoning inside <think>...</think> before its answer, and whether
  // the prompt itself opened the thinking block (DeepSeek-R1's template ends with "<think>\n"):
  // set where the prompt is rendered. The stage that turns the model's output into text
  // (detokenize) moves that reasoning into Chunk::reasoning, once, so every later stage
  // (moderation, caches, the encoders) sees a field and no marker is ever read twice.
  struct ReasoningSplit {
    bool enabled = false;
    bool open_at_start = false;
  } reasoning;
  // How the answer's tool calls are written, when the request offered tools the model may call
  // (none otherwise): set where the prompt is rendered, or by a cache from the answer it replays.
  ToolCallFormat tool_format = ToolCallFormat::none;
  GenerationTimes generation_times;

  // Typed objects one stage leaves for a later one (e.g. prefill's generation handle for decode).
  void attach(const std::string& key, std::shared_ptr<void> value);
  template <class T>
  std::shared_ptr<T> attachment(const std::string& key) const {
    return std::static_pointer_cast<T>(find_attachment(key));
  }
  // Key/value notes stages leave for later stages, headers and the access log
  // (e.g. "cache" = "exact", "arm" = "b").
  // Safe from any thread.
  void annotate(std::string key, std::string value);
  std::optional<std::string> annotation(std::string_view key) const;
  std::vector<std::pair<std::string, std::string>> annotations() const;
  // Beside annotations(), in its order: the stage (its index in the pipeline) that made each
  // one, or -1 for one made outside a stage (an engine thread, the server). Traces put each
  // note on its stage's span.
  std::vector<int32_t> annotation_stages() const;

  // Header fields for the HTTP response, whatever its status (e.g. x-ratelimit-*). Safe from any
  // thread; setting a name again replaces its value.
  void set_response_header(std::string name, std::string value);
  HeaderFields response_headers() const;

  // Runs `callback` when the last reference to the request is gone (see Sink::on_released):
  // where a stage settles what it reserved (rate-limit tokens) or records what the request
  // used (a quota ledger). Callbacks run in the order given, before the sink's on_released.
  void on_release(std::function<void(const Request&)> callback);

  // Spending beyond what was reserved at the start: a stage that holds a reservation for the
  // request (a quota) offers `reserver`, which holds `tokens` more or says no; a stage that
  // spends aside for the request (an agent's steps) asks reserve_aside first, and spends only on
  // true. Safe from any thread.
  void on_reserve(std::function<bool(int64_t tokens)> reserver);
  bool reserve_aside(int64_t tokens);

  // The text of the last user message, or "" when there is none.
  std::string last_user_message() const;

  // --- Control; safe from any thread. ---
  // Cooperative: stages and the engine stop at their next check, and the sink is told at once.
  // Without `why`, the error is a 499 "request_cancelled".
  void cancel(std::optional<RequestError> why = std::nullopt);
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  bool finished() const { return finished_.load(std::memory_order_acquire); }

  // --- Outcome; read after the sink's on_finish. ---
  const std::optional<RequestError>& error() const { return error_; }
  std::optional<FinishReason> finish_reason() const { return finish_reason_; }
  // Per stage, in pipeline order; empty before submit. A snapshot: safe while stages still run.
  std::vector<StageTiming> stage_timings() const;
  int64_t submitted_ns() const { return submitted_ns_; }
  int64_t finished_ns() const { return finished_ns_; }

 private:
  friend class detail::PipelineCore;
  friend struct detail::StageIoAccess;

  std::shared_ptr<void> find_attachment(const std::string& key) const;

  mutable std::mutex notes_mutex_;  // annotations, response headers, release callbacks
  std::vector<std::pair<std::string, std::string>> annotations_;
  std::vector<int32_t> annotation_stages_;
  HeaderFields response_headers_;
  std::vector<std::function<void(const Request&)>> release_callbacks_;
  std::vector<std::function<bool(int64_t)>> reservers_;
  std::vector<std::pair<std::string, std::shared_ptr<void>>> attachments_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finished_{false};
  std::optional<RequestError> cancel_error_;
  std::optional<RequestError> error_;
  std::optional<FinishReason> finish_reason_;
  int64_t submitted_ns_ = 0;
  int64_t finished_ns_ = 0;
  std::unique_ptr<detail::RequestRuntime> runtime_;  // set by the pipeline at submit
};

namespace detail {
// The stage the calling thread runs (its index in the pipeline), or -1: set by the runtime
// around each stage call, so that an annotation knows which stage made it.
inline thread_local int32_t running_stage = -1;
}  // namespace detail

// Steady-clock nanoseconds, the unit of StageTiming.
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace chatflow
