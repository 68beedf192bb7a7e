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

// Appends protobuf fields to one buffer. A nested message is written in place after its tag and
// its length goes in front of it once known (moving the message's bytes by the length's few
// bytes), so no message is built in a buffer of its own and copied.
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
  // Writes field `number` as a message whose fields `body` writes into this writer.
  template <class Body>
  void message_field(int number, Body body) {
    tag(number, kLengthDelimited);
    size_t start = out_.size();
    body();
    size_t size = out_.size() - start;
    char length[10];
    size_t length_size = 0;
    for (uint64_t value = size;; value >>= 7) {
      length[length_size++] = static_cast<char>(value >= 0x80 ? (value & 0x7f) | 0x80 : value);
      if (value < 0x80) break;
    }
    out_.insert(start, length, length_size);
  }
  void reserve(size_t bytes) { out_.reserve(bytes); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

void write_any_value(Writer& out, const AttributeValue& value) {
  if (const auto* text = std::get_if<std::string>(&value)) {
    out.string_field(field::kStringValue, *text);
  } else if (const auto* integer = std::get_if<int64_t>(&value)) {
    out.varint_field(field::kIntValue, static_cast<uint64_t>(*integer));
  } else if (const auto* number = std::get_if<double>(&value)) {
    uint64_t bits;
    std::memcpy(&bits, number, sizeof bits);
    out.fixed64_field(field::kDoubleValue, bits);
  } else if (const auto* flag = std::get_if<bool>(&value)) {
    out.varint_field(field::kBoolValue, *flag ? 1 : 0);
  } else if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    out.message_field(field::kArrayValue, [&] {
      for (const auto& item : *list) {
        out.message_field(field::kArrayValues,
                          [&] { out.string_field(field::kStringValue, item); });
      }
    });
  }
}

void write_attributes(Writer& out, int number, const std::vector<SpanAttribute>& attributes) {
  for (const auto& attribute : attributes) {
    out.message_field(number, [&] {
      out.string_field(field::kKey, attribute.key);
      out.message_field(field::kValue, [&] { write_any_value(out, attribute.value); });
    });
  }
}

void write_span(Writer& out, const SpanRecord& span) {
  out.bytes_field(field::kTraceId, span.trace_id.data(), span.trace_id.size());
  out.bytes_field(field::kSpanId, span.span_id.data(), span.span_id.size());
  if (!span.trace_state.empty()) out.string_field(field::kTraceState, span.trace_state);
  bool root = true;
  for (uint8_t byte : span.parent_span_id)
    root = root && byte == 0;
  if (!root) {
    out.bytes_field(field::kParentSpanId, span.parent_span_id.data(), span.parent_span_id.size());
  }
  out.string_field(field::kName, span.name);
  out.varint_field(field::kKind, static_cast<uint64_t>(span.kind));
  out.fixed64_field(field::kStartTime, static_cast<uint64_t>(span.start_unix_ns));
  out.fixed64_field(field::kEndTime, static_cast<uint64_t>(span.end_unix_ns));
  write_attributes(out, field::kSpanAttributes, span.attributes);
  if (span.status != SpanStatus::unset) {
    out.message_field(field::kStatus, [&] {
      if (!span.status_message.empty())
        out.string_field(field::kStatusMessage, span.status_message);
      out.varint_field(field::kStatusCode, static_cast<uint64_t>(span.status));
    });
  }
  // SpanFlags: the W3C trace flags (sampled) in the low byte.
  out.fixed32_field(field::kFlags, 0x01);
}

}  // namespace

std::string encode_export_request(const SpanSource& source, std::span<const SpanRecord> spans) {
  constexpr size_t kTypicalSpanBytes = 400;
  Writer out;
  out.reserve(256 + spans.size() * kTypicalSpanBytes);
  out.message_field(field::kResourceSpans, [&] {
    out.message_field(field::kResource, [&] {
      write_attributes(out, field::kAttributes, source.resource_attributes);
    });
    out.message_field(field::kScopeSpans, [&] {
      out.message_field(field::kScope, [&] {
        out.string_field(field::kScopeName, source.scope_name);
        if (!source.scope_version.empty())
          out.string_field(field::kScopeVersion, source.scope_version);
      });
      for (const auto& span : spans)
        out.message_field(field::kSpans, [&] { write_span(out, span); });
    });
  });
  return out.take();
}

}  // namespace chatflow::tracing
