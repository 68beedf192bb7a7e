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
// The engine's structured deltas are written back into the text form chatflow's stream uses,
// and the request is told how to read it, as a chat template would tell it: reasoning
// (reasoning_content) becomes "<think>...</think>" before the content, with the request's
// reasoning split on when the answer starts with reasoning; tool calls become Hermes
// "<tool_call>{"name", "arguments"}</tool_call>" blocks, with the request's tool format Hermes
// when it offers tools. sse_emit then streams them as reasoning_content and tool_calls again,
// moderation screens them, and history hands them back. What is lost: the engine's tool call
// ids (chatflow makes new ones) and log-probabilities (refused with a 400).
//
// Usage: the engine's usage event (stream_options.include_usage); when it sends none, tokens are
// counted with the upstream's tokenizer, else estimated (upstream.h).
#include <boost/json.hpp>

#include "framework/api/trace.h"
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
class UpstreamAnswer final : public upstream::StreamObserver {
 public:
  UpstreamAnswer(std::shared_ptr<Request> request, Continuation continuation,
                 std::shared_ptr<UpstreamModel> model, ChildSpan span)
      : request_(std::move(request)),
        continuation_(std::move(continuation)),
        model_(std::move(model)),
        span_(std::move(span)) {}

  // A stream that did not end well (the client left, the engine failed) still spent what it
  // generated: counted here, before the writer lets go of the request, so limits, quota and
  // metrics charge it as they do a gguf_model's partial answer.
  ~UpstreamAnswer() override {
    if (ended_ || generated_.empty()) return;
    try {
      // Only once the request ended in an error (cancelled, timed out): then nothing but its
      // release reads the usage. A stream a stage stopped (output moderation) is finished
      // elsewhere, with the tokens it counted.
      if (request_->finished() && request_->error())
        request_->usage.completion_tokens = model_->count_text_tokens(generated_);
    } catch (const std::exception&) {
      // Counting failed (out of memory): the partial answer goes uncharged rather than the
      // client thread ending the process.
    }
  }

  void on_output(const upstream::StreamEvent& event, bool first,
                 const std::string& endpoint) override {
    if (first) {
      Request* request = request_.get();
      request->annotate("upstream", endpoint);
      span_.set_attribute("server.address", endpoint);
      request->generation_times.first_token_ns = now_ns();
      // Written before the first chunk travels, so every later stage reads the answer so.
      if (!event.reasoning.empty() && request->kind == RequestKind::chat)
        request->reasoning = {true, false};
      splits_reasoning_ = request->reasoning.enabled;
      writer_ = continuation_.resume_streaming(kOut);
    }
    if (!writer_) return;  // the request ended before its first output (nothing to resume)
    std::string text;
    if (!event.reasoning.empty()) {
      if (splits_reasoning_ && !reasoning_done_) {
        if (!in_reasoning_) text += "<think>";
        in_reasoning_ = true;
      }
      text += event.reasoning;
    }
    if (!event.content.empty()) {
      text += close_reasoning() + close_call();
      text += event.content;
    }
    for (const auto& piece : event.tool_calls) {
      text += close_reasoning();
      if (!open_call_ || *open_call_ != piece.index) {
        text += close_call();
        text +=
            "<tool_call>\n{\"name\": " + boost::json::serialize(boost::json::value(piece.name)) +
            ", \"arguments\": ";
        open_call_ = piece.index;
      }
      text += piece.arguments;
      arguments_written_ = arguments_written_ || !piece.arguments.empty();
    }
    generated_ += text;
    Chunk chunk = Chunk::delta(std::move(text));
    chunk.tokens_without_ids = event.pieces;
    writer_.write(std::move(chunk));
  }

  void on_end(const upstream::StreamEnd& end) override {
    Request* request = request_.get();
    request->generation_times.finished_ns = now_ns();
    if (!writer_) writer_ = continuation_.resume_streaming(kOut);  // an empty answer
    Chunk last;
    last.text = close_reasoning() + close_call();
    generated_ += last.text;
    Usage usage = request->usage;  // the prompt as counted before the call
    if (end.usage && end.usage->prompt_tokens > 0) {
      usage = *end.usage;
    } else {
      usage.completion_tokens = model_->count_text_tokens(generated_);
    }
    // The last chunk carries it; the runtime writes it into the request when the chunk reaches
    // the sink (this thread writing the request would race stages reading it).
    last.finish = finish_reason_of(end.finish_reason);
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
  std::string close_reasoning() {
    if (!in_reasoning_) return {};
    in_reasoning_ = false;
    reasoning_done_ = true;
    return "</think>";
  }

  std::string close_call() {
    if (!open_call_) return {};
    open_call_.reset();
    std::string text = arguments_written_ ? "}\n</tool_call>" : "{}}\n</tool_call>";
    arguments_written_ = false;
    return text;
  }

  std::shared_ptr<Request> request_;
  Continuation continuation_;
  std::shared_ptr<UpstreamModel> model_;
  // The call as a CLIENT span of the request's trace (records nothing when tracing is off);
  // cancelled() ends it too, which is const to the client.
  mutable ChildSpan span_;
  ChunkWriter writer_;
  bool splits_reasoning_ = false;
  bool in_reasoning_ = false;
  bool reasoning_done_ = false;
  std::optional<int> open_call_;
  bool arguments_written_ = false;
  std::string generated_;
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
    if (request.kind == RequestKind::chat && !generation.tools.empty() &&
        generation.tool_choice != ToolChoice::none) {
      request.tool_format = ToolCallFormat::hermes;
    }
    request.usage.prompt_tokens = model_->count_prompt_tokens(request);
    upstream::UpstreamCall call;
    call.path = upstream::request_path(request);
    call.body = upstream::request_body(request, model_->upstream_model());
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
    call.observer =
        std::make_shared<UpstreamAnswer>(io.request_ptr(), io.defer(), model_, std::move(span));
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
