// upstream_generate: generates the answer through an `upstream` resource, an OpenAI-compatible
// engine, in place of tokenize → prefill → decode → detokenize.
//
// Design: the stage is one request stage whose stream port carries text deltas, exactly what
// detokenize emits for a gguf_model, so everything after it (output_moderation, sse_emit, the
// caches and session history recording the answer, usage, metrics) works unchanged. Like
// prefill, it defers the request until the engine's first output, so until then a failure is
// still an HTTP error with its own status (502 upstream error, 504 timeout, 503 no healthy
// endpoint) and the client may retry on another endpoint; after it, a failure ends the stream
// with an error event, as an engine error does.
//
// The engine's structured deltas travel as they came, each in its own field of the chunk:
// reasoning (reasoning_content, or `reasoning`) in Chunk::reasoning, content in Chunk::text,
// tool calls in Chunk::tool_calls, each once it is whole and can be made (see close_call). None
// of it is written as markup a later stage reads again, so a "</think>" in the reasoning or a
// "<tool_call>" in the content is text like any other and reaches the client byte for byte.
// sse_emit streams them as reasoning_content, content and tool_calls, moderation screens each,
// caches replay them, and history keeps the content. What is lost: log-probabilities (refused
// with a 400).
//
// The engine is held to the request's max_tokens (or the upstream's bound for a request without
// one) even when it ignores it: see UpstreamAnswer. Usage: the engine's usage event
// (stream_options.include_usage), believed only within those bounds; when it sends none, tokens
// are counted with the upstream's tokenizer, else estimated (upstream.h).
#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include <boost/json.hpp>

#include "framework/api/trace.h"
#include "framework/chat/tool_calls.h"
#include "framework/upstream/request_body.h"
#include "stages/upstream.h"

namespace chatflow {
namespace {

struct UpstreamGenerateConfig {
  std::string model;
};

constexpr PortId kOut = 0;

FinishReason finish_reason_of(const std::optional<std::string>& reason) {
  if (reason == "length") return FinishReason::length;
  if (reason == "content_filter") return FinishReason::content_filter;
  return FinishReason::stop;  // stop, tool_calls, eos, or none given
}

// Same session, same endpoint: the session's own id, else the caller.
std::string affinity_key(const Request& request) {
  const Identity& identity = request.identity;
  if (!request.session_id.empty())
    return "session:" + identity.tenant + "/" + identity.owner() + "/" + request.session_id;
  if (!identity.user.empty()) return "user:" + identity.tenant + "/" + identity.user;
  if (!identity.key_id.empty()) return "key:" + identity.key_id;
  return {};
}

// One request's answer as the engine streams it, written into the pipeline's stream. Runs on
// the upstream client's thread, and is destroyed on its releaser: it holds the request so that
// the last reference, and with it the request's release work, is never let go of on the thread
// every call's stream depends on.
//
// The request's max_tokens holds here too, whatever the engine does with it: output is counted
// as it comes (UpstreamModel::count_output_tokens), and the event that would pass the limit is
// cut to it, the answer ends with finish_reason "length", and the call ends, which closes the
// connection so that the engine stops. Usage never counts more completion tokens than the limit.
class UpstreamAnswer final : public upstream::StreamObserver {
 public:
  UpstreamAnswer(std::shared_ptr<Request> request, Continuation continuation,
                 std::shared_ptr<UpstreamModel> model, ChildSpan span, int64_t token_limit)
      : request_(std::move(request)),
        continuation_(std::move(continuation)),
        model_(std::move(model)),
        span_(std::move(span)),
        token_limit_(token_limit) {}

  // A stream that did not end well (the client left, the engine failed) still spent what it
  // generated: counted here, before the writer lets go of the request, so limits, quota and
  // metrics charge it as they do a gguf_model's partial answer.
  ~UpstreamAnswer() override {
    if (ended_ || delivered_tokens_ == 0) return;
    // Only once the request ended in an error (cancelled, timed out): then nothing but its
    // release reads the usage. A stream a stage stopped (output moderation) is finished
    // elsewhere, with the tokens it counted.
    if (request_->finished() && request_->error())
      request_->usage.completion_tokens = charged_completion_tokens();
  }

  bool on_output(const upstream::StreamEvent& event, bool first,
                 const std::string& endpoint) override {
    if (first) {
      Request* request = request_.get();
      request->annotate("upstream", endpoint);
      span_.set_attribute("server.address", endpoint);
      request->generation_times.first_token_ns = now_ns();
      writer_ = continuation_.resume_streaming(kOut);
    }
    if (!writer_) return false;  // the request ended before its first output: nothing to write
    int64_t counted = model_->count_output_tokens(output_text(event), event.pieces);
    int64_t left = token_limit_ - delivered_tokens_;
    if (counted <= left) {
      write(event, counted, event.pieces);
      return true;
    }
    upstream::StreamEvent kept = cut_event(event, left, counted);
    write(kept, left, std::min(event.pieces, left));
    end_stream(FinishReason::length, usage_as_counted());
    return false;
  }

  void on_end(const upstream::StreamEnd& end) override {
    if (!writer_) writer_ = continuation_.resume_streaming(kOut);  // an empty answer
    Usage usage = usage_as_counted();
    // The engine's own count, believed within what it can be: no more completion tokens than
    // the limit it was held to, no more prompt tokens than the prompt's bytes allow.
    if (end.usage && end.usage->prompt_tokens > 0) {
      usage.prompt_tokens =
          std::min(end.usage->prompt_tokens, model_->prompt_token_bound(*request_));
      usage.cached_prompt_tokens = std::min(end.usage->cached_prompt_tokens, usage.prompt_tokens);
      usage.completion_tokens = std::min(end.usage->completion_tokens, token_limit_);
    }
    end_stream(finish_reason_of(end.finish_reason), usage);
  }

  void on_failure(const RequestError& error, bool) override {
    request_->generation_times.finished_ns = now_ns();
    span_.set_attribute("http.response.status_code", int64_t{error.status});
    span_.set_error(error.message);
    span_.end();
    if (writer_) {
      writer_.fail(error);
      writer_ = ChunkWriter();
    } else if (continuation_) {
      continuation_.fail(error);
    }
  }

  void on_abandoned() override {
    writer_ = ChunkWriter();
    continuation_ = Continuation();  // a request not over yet fails as abandoned
  }

  bool cancelled() const override {
    bool over = request_->cancelled() || request_->finished() || (writer_ && writer_.stopped());
    if (over) {
      span_.set_error("cancelled");
      span_.end();
    }
    return over;
  }

 private:
  // A tool call as the engine streams it: held until it is whole, so that what is passed on
  // can be checked (see close_call).
  struct OpenCall {
    int index = 0;
    std::string id;
    std::string name;
    std::string arguments;
  };

  // The text the engine generated in `event`, which its tokens stand for.
  static std::string output_text(const upstream::StreamEvent& event) {
    std::string text = event.reasoning + event.content;
    for (const auto& piece : event.tool_calls)
      text += piece.name + piece.arguments;
    return text;
  }

  // The start of `event` that holds `tokens` of the `counted` its text stands for, in the order
  // the engine wrote it: reasoning, content, then the tool calls.
  upstream::StreamEvent cut_event(const upstream::StreamEvent& event, int64_t tokens,
                                  int64_t counted) const {
    size_t budget = model_->cut_output(output_text(event), tokens, counted).size();
    auto take = [&budget](const std::string& text) {
      std::string kept = text.substr(0, std::min(budget, text.size()));
      budget -= kept.size();
      return kept;
    };
    upstream::StreamEvent kept;
    kept.reasoning = take(event.reasoning);
    kept.content = take(event.content);
    for (const auto& piece : event.tool_calls) {
      if (budget == 0) break;
      upstream::ToolCallPiece part = piece;
      part.name = take(piece.name);
      part.arguments = take(piece.arguments);
      kept.tool_calls.push_back(std::move(part));
    }
    return kept;
  }

  // The event's parts into their fields: reasoning and content as the engine wrote them (a
  // completion has no reasoning field: there the reasoning is text), a call once it is whole.
  void write(const upstream::StreamEvent& event, int64_t tokens, int64_t engine_events) {
    Chunk chunk;
    // Other output ends the call being written (its text, when it is no call, comes first).
    if (!event.reasoning.empty() || !event.content.empty()) close_call(chunk);
    if (request_->kind == RequestKind::chat) {
      chunk.reasoning = event.reasoning;
    } else {
      chunk.text += event.reasoning;
    }
    chunk.text += event.content;
    for (const auto& piece : event.tool_calls) {
      if (!open_call_ || open_call_->index != piece.index) {
        close_call(chunk);
        open_call_ = OpenCall{piece.index, piece.id, piece.name, {}};
      }
      if (open_call_->id.empty()) open_call_->id = piece.id;
      if (open_call_->name.empty()) open_call_->name = piece.name;
      open_call_->arguments += piece.arguments;
    }
    delivered_tokens_ += tokens;
    delivered_bytes_ += static_cast<int64_t>(output_text(event).size());
    held_events_ += engine_events;
    // A call still being written: its tokens go with it.
    if (chunk.text.empty() && chunk.reasoning.empty() && chunk.tool_calls.empty()) return;
    chunk.tokens_without_ids = std::exchange(held_events_, 0);
    writer_.write(std::move(chunk));
  }

  // What the answer spent by the gateway's own count, for when the engine reports nothing: the
  // tokenizer's, else the larger of one per event and one per 4 bytes; never past the limit.
  Usage usage_as_counted() const {
    Usage usage = request_->usage;  // the prompt as counted before the call
    usage.completion_tokens = charged_completion_tokens();
    return usage;
  }

  int64_t charged_completion_tokens() const {
    int64_t tokens = delivered_tokens_;
    if (!model_->tokenizer()) tokens = std::max(tokens, (delivered_bytes_ + 3) / 4);
    return std::min(tokens, token_limit_);
  }

  void end_stream(FinishReason finish, const Usage& usage) {
    request_->generation_times.finished_ns = now_ns();
    Chunk last;
    close_call(last);
    last.tokens_without_ids = std::exchange(held_events_, 0);
    // The last chunk carries the usage; the runtime writes it into the request when the chunk
    // reaches the sink (this thread writing the request would race stages reading it).
    last.finish = finish;
    last.usage = usage;
    // Ended before the last chunk: the request's spans are taken once it finishes.
    span_.set_attribute("http.response.status_code", int64_t{200});
    span_.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens);
    span_.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens);
    span_.end();
    writer_.write(std::move(last));
    writer_ = ChunkWriter();
    ended_ = true;
  }

  // The held call, now whole, into `chunk`. A call that can be made, as a local model's must
  // (framework/chat/tool_calls.h: a function the request offers, arguments that are a JSON
  // object, one its schema accepts for a strict tool), goes as a call with the engine's id (a
  // new one when it gave none) and its arguments as it wrote them. Any other is no call: its
  // text is content, written as a Hermes block whose arguments are a JSON string unless they are
  // an object, so that a client never gets arguments it cannot parse.
  void close_call(Chunk& chunk) {
    if (!open_call_) return;
    OpenCall call = std::move(*open_call_);
    open_call_.reset();
    if (call.arguments.empty()) call.arguments = "{}";
    if (can_be_made(call)) {
      std::string id = call.id.empty() ? chat::new_tool_call_id(ToolCallFormat::hermes) : call.id;
      chunk.tool_calls.push_back({std::move(id), std::move(call.name), std::move(call.arguments)});
      return;
    }
    boost::system::error_code error;
    boost::json::value arguments = boost::json::parse(call.arguments, error);
    std::string written = !error && arguments.is_object()
                              ? call.arguments
                              : boost::json::serialize(boost::json::value(call.arguments));
    chunk.text +=
        "<tool_call>\n{\"name\": " + boost::json::serialize(boost::json::value(call.name)) +
        ", \"arguments\": " + written + "}\n</tool_call>";
  }

  bool can_be_made(const OpenCall& call) {
    const GenerationParams& generation = request_->generation;
    if (request_->kind != RequestKind::chat || generation.tool_choice == ToolChoice::none)
      return false;
    std::vector<std::string> offered = chat::offered_names(generation.tools);
    if (std::find(offered.begin(), offered.end(), call.name) == offered.end()) return false;
    if (!call_checker_) call_checker_.emplace(ToolCallFormat::hermes, generation.tools);
    return call_checker_->arguments_acceptable(call.name, call.arguments);
  }

  std::shared_ptr<Request> request_;
  Continuation continuation_;
  std::shared_ptr<UpstreamModel> model_;
  // The call as a CLIENT span of the request's trace (records nothing when tracing is off);
  // cancelled() ends it too, which is const to the client.
  mutable ChildSpan span_;
  ChunkWriter writer_;
  int64_t token_limit_;
  int64_t delivered_tokens_ = 0;  // by count_output_tokens
  int64_t delivered_bytes_ = 0;
  int64_t held_events_ = 0;  // engine events whose text is not written yet (a call in progress)
  std::optional<OpenCall> open_call_;
  std::optional<chat::ToolCallStreamer> call_checker_;  // checks calls' arguments
  bool ended_ = false;
};

class UpstreamGenerateStage final : public RequestStage {
 public:
  explicit UpstreamGenerateStage(std::shared_ptr<UpstreamModel> model) : model_(std::move(model)) {}

  Route process(Request& request, StageIo& io) override {
    const GenerationParams& generation = request.generation;
    if (generation.logprobs || generation.top_logprobs > 0) {
      throw RequestFailure(RequestError{400, "invalid_request_error",
                                        "logprobs are not available through this pipeline's "
                                        "upstream engine",
                                        "unsupported_parameter", "logprobs"});
    }
    if (request.kind == RequestKind::chat && request.messages.empty()) {
      throw RequestFailure(RequestError{400,
                                        "invalid_request_error",
                                        "'messages' must contain at least one message",
                                        {},
                                        "messages"});
    }
    request.usage.prompt_tokens = model_->count_prompt_tokens(request);
    UpstreamModel::AnswerLimit limit =
        model_->answer_limit(request.generation, request.usage.prompt_tokens);
    upstream::UpstreamCall call;
    call.path = upstream::request_path(request);
    call.body =
        upstream::request_body(request, model_->upstream_model(), limit.sent ? limit.tokens : 0);
    call.affinity_key = affinity_key(request);
    ChildSpan span;
    if (request.trace) {
      span = request.trace->start_child("POST " + call.path, SpanKind::client);
      span.set_attribute("http.request.method", std::string("POST"));
      span.set_attribute(
          "gen_ai.operation.name",
          std::string(request.kind == RequestKind::chat ? "chat" : "text_completion"));
      span.set_attribute("gen_ai.request.model", model_->upstream_model());
      call.headers.emplace_back("traceparent", span.traceparent());
      if (!span.tracestate().empty()) call.headers.emplace_back("tracestate", span.tracestate());
    } else {
      // Tracing off here: the caller's trace still goes on through us to the engine.
      for (const char* name : {"traceparent", "tracestate"}) {
        if (auto value = request.header(name)) call.headers.emplace_back(name, std::string(*value));
      }
    }
    if (!request.request_id.empty()) call.headers.emplace_back("x-request-id", request.request_id);
    request.generation_times.queued_ns = now_ns();
    call.observer = std::make_shared<UpstreamAnswer>(io.request_ptr(), io.defer(), model_,
                                                     std::move(span), limit.tokens);
    model_->client().start(std::move(call));
    return Route::deferred();
  }

 private:
  std::shared_ptr<UpstreamModel> model_;
};

StageTypeInfo upstream_generate_stage_type() {
  StageTypeBuilder<UpstreamGenerateConfig> type(
      "upstream_generate", StageKind::request,
      "Generates the answer through an upstream engine (OpenAI-compatible); streams text "
      "deltas as detokenize does.");
  type.port("out", PortKind::stream, "text deltas, once the engine's first output exists");
  type.config()
      .key("model", &UpstreamGenerateConfig::model, "an upstream resource")
      .required()
      .resource("upstream");
  type.create([](const UpstreamGenerateConfig& config, StageContext& context) {
    return std::make_unique<UpstreamGenerateStage>(context.resource<UpstreamModel>(config.model));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(upstream_generate_stage_type);

}  // namespace
}  // namespace chatflow
