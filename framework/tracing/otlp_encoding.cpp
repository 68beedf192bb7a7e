#include "framework/tracing/otlp_encoding.h"

#include <cstring>

namespace chatflow::tracing {
namespace {

// Field numbers from the OTLP .proto files (v1).
namespace field {
constexpr int kResourceSpans = 1;  // ExportTraceServiceRequest
constexpr int kResource = 1;       // ResourceSpans
constexpr int kScopeSpans = 2;
constexpr int kAttributes = 1;  // Resource
constexpr int kScope = 1;       // ScopeSpans
constexpr int kSpans = 2;
constexpr int kScopeName = 1;  // InstrumentationScope
constexpr int kScopeVersion = 2;
constexpr int kTraceId = 1;  // Span
constexpr int kSpanId = 2;
constexpr int kTraceState = 3;
constexpr int kParentSpanId = 4;
constexpr int kName = 5;
constexpr int kKind = 6;
constexpr int kStartTime = 7;
constexpr int kEndTime = 8;
constexpr int kSpanAttributes = 9;
constexpr int kStatus = 15;
constexpr int kFlags = 16;
constexpr int kStatusMessage = 2;  // Status
constexpr int kStatusCode = 3;
constexpr int kKey = 1;  // KeyValue
constexpr int kValue = 2;
constexpr int kStringValue = 1;  // AnyValue
constexpr int kBoolValue = 2;
constexpr int kIntValue = 3;
constexpr int kDoubleValue = 4;
constexpr int kArrayValue = 5;
constexpr int kArrayValues = 1;  // ArrayValue
}  // namespace field

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Appends protobuf fields to a string. A nested message is written into a buffer of its own
// first, since its length prefix comes before it.
class Writer {
 public:
  void varint(uint64_t value) {
    while (value >= 0x80) {
      out_.push_back(static_cast<char>(value | 0x80));
      value >>= 7;
    }
    out_.push_back(static_cast<char>(value));
  }
  void tag(int number, WireType type) { varint(static_cast<uint64_t>(number) << 3 | type); }
  void varint_field(int number, uint64_t value) {
    tag(number, kVarint);
    varint(value);
  }
  void fixed64_field(int number, uint64_t value) {
    tag(number, kFixed64);
    for (int i = 0; i < 8; ++i)
      out_.push_back(static_cast<char>(value >> (8 * i)));
  }
  void fixed32_field(int number, uint32_t value) {
    tag(number, kFixed32);
    for (int i = 0; i < 4; ++i)
      out_.push_back(static_cast<char>(value >> (8 * i)));
  }
  void bytes_field(int number, const void* data, size_t size) {
    tag(number, kLengthDelimited);
    varint(size);
    out_.append(static_cast<const char*>(data), size);
  }
  void string_field(int number, const std::string& value) {
    bytes_field(number, value.data(), value.size());
  }
  void message_field(int number, const Writer& message) {
    bytes_field(number, message.out_.data(), message.out_.size());
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

Writer any_value(const AttributeValue& value) {
  Writer any;
  if (const auto* text = std::get_if<std::string>(&value)) {
    any.string_field(field::kStringValue, *text);
  } else if (const auto* integer = std::get_if<int64_t>(&value)) {
    any.varint_field(field::kIntValue, static_cast<uint64_t>(*integer));
  } else if (const auto* number = std::get_if<double>(&value)) {
    uint64_t bits;
    std::memcpy(&bits, number, sizeof bits);
    any.fixed64_field(field::kDoubleValue, bits);
  } else if (const auto* flag = std::get_if<bool>(&value)) {
    any.varint_field(field::kBoolValue, *flag ? 1 : 0);
  } else if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    Writer array;
    for (const auto& item : *list) {
      Writer element;
      element.string_field(field::kStringValue, item);
      array.message_field(field::kArrayValues, element);
    }
    any.message_field(field::kArrayValue, array);
  }
  return any;
}

void write_attributes(Writer& owner, int number, const std::vector<SpanAttribute>& attributes) {
  for (const auto& attribute : attributes) {
    Writer key_value;
    key_value.string_field(field::kKey, attribute.key);
    key_value.message_field(field::kValue, any_value(attribute.value));
    owner.message_field(number, key_value);
  }
}

Writer span_message(const SpanRecord& span) {
  Writer message;
  message.bytes_field(field::kTraceId, span.trace_id.data(), span.trace_id.size());
  message.bytes_field(field::kSpanId, span.span_id.data(), span.span_id.size());
  if (!span.trace_state.empty()) message.string_field(field::kTraceState, span.trace_state);
  bool root = true;
  for (uint8_t byte : span.parent_span_id)
    root = root && byte == 0;
  if (!root) {
    message.bytes_field(field::kParentSpanId, span.parent_span_id.data(),
                        span.parent_span_id.size());
  }
  message.string_field(field::kName, span.name);
  message.varint_field(field::kKind, static_cast<uint64_t>(span.kind));
  message.fixed64_field(field::kStartTime, static_cast<uint64_t>(span.start_unix_ns));
  message.fixed64_field(field::kEndTime, static_cast<uint64_t>(span.end_unix_ns));
  write_attributes(message, field::kSpanAttributes, span.attributes);
  if (span.status != SpanStatus::unset) {
    Writer status;
    if (!span.status_message.empty())
      status.string_field(field::kStatusMessage, span.status_message);
    status.varint_field(field::kStatusCode, static_cast<uint64_t>(span.status));
    message.message_field(field::kStatus, status);
  }
  // SpanFlags: the W3C trace flags (sampled) in the low byte.
  message.fixed32_field(field::kFlags, 0x01);
  return message;
}

}  // namespace

std::string encode_export_request(const SpanSource& source, std::span<const SpanRecord> spans) {
  Writer resource;
  write_attributes(resource, field::kAttributes, source.resource_attributes);
  Writer scope;
  scope.string_field(field::kScopeName, source.scope_name);
  if (!source.scope_version.empty()) scope.string_field(field::kScopeVersion, source.scope_version);
  Writer scope_spans;
  scope_spans.message_field(field::kScope, scope);
  for (const auto& span : spans)
    scope_spans.message_field(field::kSpans, span_message(span));
  Writer resource_spans;
  resource_spans.message_field(field::kResource, resource);
  resource_spans.message_field(field::kScopeSpans, scope_spans);
  Writer request;
  request.message_field(field::kResourceSpans, resource_spans);
  return request.take();
}

}  // namespace chatflow::tracing
