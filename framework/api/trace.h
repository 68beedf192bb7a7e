// A request's place in a distributed trace (W3C Trace Context, OpenTelemetry's span model): the
// identity of its server span, which code on the request path passes on to the services it calls,
// and the spans such code opens as children (an upstream call). The server creates it when
// tracing is on (framework/tracing/tracer.h) and turns the finished request into its spans.
//
//   if (request.trace) {
//     ChildSpan call = request.trace->start_child("POST /v1/chat/completions", SpanKind::client);
//     headers.emplace_back("traceparent", call.traceparent());
//     ... the call ...
//     call.set_attribute("http.response.status_code", int64_t{status});
//   }  // the span ends here (or at call.end()) and goes out with the request's other spans
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace chatflow {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

// Random and never all zeros (W3C: an all-zero id is invalid). Safe from any thread.
TraceId random_trace_id();
SpanId random_span_id();

// Lower-case hexadecimal, as traceparent writes ids.
std::string to_hex(const uint8_t* bytes, size_t size);
template <size_t N>
std::string to_hex(const std::array<uint8_t, N>& bytes) {
  return to_hex(bytes.data(), N);
}

struct SpanContext {
  TraceId trace_id{};
  SpanId span_id{};
  bool sampled = false;
  std::string trace_state;  // the W3C tracestate that came in, passed on unchanged
};

// "00-<trace id>-<span id>-<flags>": the traceparent header naming `context` as the parent.
std::string format_traceparent(const SpanContext& context);

// OTLP's SpanKind numbers.
enum class SpanKind : uint8_t { internal = 1, server = 2, client = 3 };

using AttributeValue = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;

struct SpanAttribute {
  std::string key;
  AttributeValue value;
};

enum class SpanStatus : uint8_t { unset = 0, ok = 1, error = 2 };  // OTLP's StatusCode

// One finished span, as the exporter sends it. Times are Unix nanoseconds.
struct SpanRecord {
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_span_id{};  // all zeros: a root span
  std::string trace_state;
  std::string name;
  SpanKind kind = SpanKind::internal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  std::vector<SpanAttribute> attributes;
  SpanStatus status = SpanStatus::unset;
  std::string status_message;
};

// Unix nanoseconds now (span times are wall-clock; the request's own times are steady-clock).
int64_t unix_now_ns();

class RequestTrace;

// A child span of a request's server span, open until end() or its destruction. Move-only.
// For a request that is not sampled it records nothing, but still gives a traceparent (with the
// sampled flag off), so the services called keep the trace id and the decision.
class ChildSpan {
 public:
  ChildSpan() = default;
  ChildSpan(ChildSpan&& other) noexcept;
  ChildSpan& operator=(ChildSpan&& other) noexcept;
  ChildSpan(const ChildSpan&) = delete;
  ChildSpan& operator=(const ChildSpan&) = delete;
  ~ChildSpan();

  // The header value to send with the call this span stands for: this span is the callee's
  // parent. Empty for a default-constructed span.
  std::string traceparent() const;
  // The tracestate to send along, or "" (then send no header).
  const std::string& tracestate() const { return context_.trace_state; }
  const SpanContext& context() const { return context_; }

  void set_attribute(std::string key, AttributeValue value);
  // Marks the span failed (OTLP status ERROR) with `message`.
  void set_error(std::string message);
  // Ends the span now and hands it to its request's trace; later calls do nothing.
  void end();

 private:
  friend class RequestTrace;
  std::shared_ptr<RequestTrace> trace_;
  SpanContext context_;
  SpanRecord record_;
};

// The trace of one request: its server span's identity (new, or continuing an incoming
// traceparent), whether it is sampled, and the child spans other code recorded for it.
// Safe from any thread.
class RequestTrace : public std::enable_shared_from_this<RequestTrace> {
 public:
  // `server_span`: the request's own span (its trace id, its new span id, the sampling
  // decision); `parent_span_id`: the caller's span from an incoming traceparent, or zeros.
  RequestTrace(SpanContext server_span, SpanId parent_span_id)
      : server_span_(std::move(server_span)), parent_span_id_(parent_span_id) {}

  const SpanContext& server_span() const { return server_span_; }
  const SpanId& parent_span_id() const { return parent_span_id_; }
  bool sampled() const { return server_span_.sampled; }
  // The traceparent naming the server span as the parent, for a call made without a span.
  std::string traceparent() const { return format_traceparent(server_span_); }

  // Opens a child span of the server span; it starts now.
  ChildSpan start_child(std::string name, SpanKind kind);

  // The child spans that ended so far; the server takes them once the request is over.
  std::vector<SpanRecord> take_children();

 private:
  friend class ChildSpan;
  void record(SpanRecord span);

  SpanContext server_span_;
  SpanId parent_span_id_;
  std::mutex mutex_;
  std::vector<SpanRecord> children_;
};

}  // namespace chatflow
