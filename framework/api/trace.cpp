#include "framework/api/trace.h"

#include <chrono>
#include <random>
#include <utility>

namespace chatflow {
namespace {

// One generator per thread: ids are made on every traced request, never behind a lock.
std::mt19937_64& id_generator() {
  thread_local std::mt19937_64 generator = [] {
    std::random_device device;
    std::seed_seq seed{device(), device(), device(), device()};
    return std::mt19937_64(seed);
  }();
  return generator;
}

template <size_t N>
std::array<uint8_t, N> random_id() {
  std::array<uint8_t, N> id{};
  bool zero = true;
  while (zero) {
    for (size_t i = 0; i < N; i += 8) {
      uint64_t bits = id_generator()();
      for (size_t j = 0; j < 8 && i + j < N; ++j)
        id[i + j] = static_cast<uint8_t>(bits >> (8 * j));
    }
    for (uint8_t byte : id)
      zero = zero && byte == 0;
  }
  return id;
}

}  // namespace

TraceId random_trace_id() {
  return random_id<16>();
}

SpanId random_span_id() {
  return random_id<8>();
}

std::string to_hex(const uint8_t* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(size * 2, '0');
  for (size_t i = 0; i < size; ++i) {
    text[2 * i] = kDigits[bytes[i] >> 4];
    text[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return text;
}

std::string format_traceparent(const SpanContext& context) {
  return "00-" + to_hex(context.trace_id) + "-" + to_hex(context.span_id) +
         (context.sampled ? "-01" : "-00");
}

int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ChildSpan::ChildSpan(ChildSpan&& other) noexcept
    : trace_(std::move(other.trace_)),
      context_(std::move(other.context_)),
      record_(std::move(other.record_)) {}

ChildSpan& ChildSpan::operator=(ChildSpan&& other) noexcept {
  if (this != &other) {
    end();
    trace_ = std::move(other.trace_);
    context_ = std::move(other.context_);
    record_ = std::move(other.record_);
  }
  return *this;
}

ChildSpan::~ChildSpan() {
  end();
}

std::string ChildSpan::traceparent() const {
  return trace_ ? format_traceparent(context_) : std::string();
}

void ChildSpan::set_attribute(std::string key, AttributeValue value) {
  if (!trace_ || !context_.sampled) return;
  record_.attributes.push_back({std::move(key), std::move(value)});
}

void ChildSpan::set_error(std::string message) {
  record_.status = SpanStatus::error;
  record_.status_message = std::move(message);
}

void ChildSpan::end() {
  if (!trace_) return;
  std::shared_ptr<RequestTrace> trace = std::move(trace_);
  trace_.reset();
  if (!context_.sampled) return;
  record_.end_unix_ns = unix_now_ns();
  trace->record(std::move(record_));
}

ChildSpan RequestTrace::start_child(std::string name, SpanKind kind) {
  ChildSpan span;
  span.trace_ = shared_from_this();
  span.context_.trace_id = server_span_.trace_id;
  span.context_.span_id = random_span_id();
  span.context_.sampled = server_span_.sampled;
  span.context_.trace_state = server_span_.trace_state;
  if (server_span_.sampled) {
    span.record_.trace_id = server_span_.trace_id;
    span.record_.span_id = span.context_.span_id;
    span.record_.parent_span_id = server_span_.span_id;
    span.record_.trace_state = server_span_.trace_state;
    span.record_.name = std::move(name);
    span.record_.kind = kind;
    span.record_.start_unix_ns = unix_now_ns();
  }
  return span;
}

std::vector<SpanRecord> RequestTrace::take_children() {
  std::lock_guard lock(mutex_);
  return std::exchange(children_, {});
}

void RequestTrace::record(SpanRecord span) {
  std::lock_guard lock(mutex_);
  children_.push_back(std::move(span));
}

}  // namespace chatflow
