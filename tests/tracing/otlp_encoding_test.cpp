// The OTLP protobuf body, read back with a protobuf wire-format reader of the test's own and
// checked against the field numbers of opentelemetry/proto (trace/v1/trace.proto,
// common/v1/common.proto, collector/trace/v1/trace_service.proto).
#include "framework/tracing/otlp_encoding.h"

#include <cstring>
#include <map>
#include <stdexcept>

#include <gtest/gtest.h>

namespace chatflow::tracing {
namespace {

struct Field {
  int number = 0;
  int wire_type = 0;
  uint64_t integer = 0;  // varint, fixed64, fixed32
  std::string bytes;     // length-delimited
};

// Every field of one message, in order; throws on anything malformed.
std::vector<Field> read_message(const std::string& data) {
  std::vector<Field> fields;
  size_t at = 0;
  auto varint = [&]() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= data.size()) throw std::runtime_error("truncated varint");
      auto byte = static_cast<uint8_t>(data[at++]);
      value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return value;
    }
    throw std::runtime_error("varint too long");
  };
  auto fixed = [&](int size) {
    if (at + size > data.size()) throw std::runtime_error("truncated fixed field");
    uint64_t value = 0;
    for (int i = 0; i < size; ++i)
      value |= uint64_t{static_cast<uint8_t>(data[at + i])} << (8 * i);
    at += size;
    return value;
  };
  while (at < data.size()) {
    uint64_t tag = varint();
    Field field;
    field.number = static_cast<int>(tag >> 3);
    field.wire_type = static_cast<int>(tag & 7);
    switch (field.wire_type) {
      case 0:
        field.integer = varint();
        break;
      case 1:
        field.integer = fixed(8);
        break;
      case 5:
        field.integer = fixed(4);
        break;
      case 2: {
        uint64_t size = varint();
        if (at + size > data.size()) throw std::runtime_error("truncated bytes field");
        field.bytes = data.substr(at, size);
        at += size;
        break;
      }
      default:
        throw std::runtime_error("unexpected wire type " + std::to_string(field.wire_type));
    }
    fields.push_back(std::move(field));
  }
  return fields;
}

std::vector<Field> all(const std::vector<Field>& fields, int number) {
  std::vector<Field> found;
  for (const auto& field : fields)
    if (field.number == number) found.push_back(field);
  return found;
}

Field one(const std::vector<Field>& fields, int number) {
  auto found = all(fields, number);
  if (found.size() != 1)
    throw std::runtime_error("field " + std::to_string(number) + " appears " +
                             std::to_string(found.size()) + " times");
  return found[0];
}

std::string bytes_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// KeyValue list -> key -> AnyValue fields.
std::map<std::string, std::vector<Field>> attributes_of(const std::vector<Field>& owner,
                                                        int number) {
  std::map<std::string, std::vector<Field>> attributes;
  for (const auto& key_value : all(owner, number)) {
    auto fields = read_message(key_value.bytes);
    attributes[one(fields, 1).bytes] = read_message(one(fields, 2).bytes);
  }
  return attributes;
}

SpanRecord sample_span() {
  SpanRecord span;
  for (uint8_t i = 0; i < 16; ++i)
    span.trace_id[i] = static_cast<uint8_t>(0x10 + i);
  for (uint8_t i = 0; i < 8; ++i) {
    span.span_id[i] = static_cast<uint8_t>(0xa0 + i);
    span.parent_span_id[i] = static_cast<uint8_t>(0xb0 + i);
  }
  span.trace_state = "vendor=x";
  span.name = "POST /v1/chat/completions";
  span.kind = SpanKind::server;
  span.start_unix_ns = 1'700'000'000'123'456'789;
  span.end_unix_ns = 1'700'000'000'223'456'789;
  span.attributes = {{"http.route", std::string("/v1/chat/completions")},
                     {"gen_ai.usage.input_tokens", int64_t{42}},
                     {"gen_ai.request.temperature", 0.25},
                     {"chatflow.stream", true},
                     {"gen_ai.response.finish_reasons", std::vector<std::string>{"stop", "length"}},
                     {"negative", int64_t{-3}}};
  span.status = SpanStatus::error;
  span.status_message = "boom";
  return span;
}

TEST(OtlpEncoding, ASpanReadsBackWithEveryField) {
  SpanSource source;
  source.resource_attributes = {{"service.name", std::string("chatflow-test")}};
  source.scope_version = "1.2";
  std::vector<SpanRecord> spans{sample_span()};
  std::string body = encode_export_request(source, spans);

  auto request = read_message(body);
  auto resource_spans = read_message(one(request, 1).bytes);
  auto resource = read_message(one(resource_spans, 1).bytes);
  auto resource_attributes = attributes_of(resource, 1);
  EXPECT_EQ(one(resource_attributes.at("service.name"), 1).bytes, "chatflow-test");
  auto scope_spans = read_message(one(resource_spans, 2).bytes);
  auto scope = read_message(one(scope_spans, 1).bytes);
  EXPECT_EQ(one(scope, 1).bytes, "chatflow");
  EXPECT_EQ(one(scope, 2).bytes, "1.2");

  auto span = read_message(one(scope_spans, 2).bytes);
  const SpanRecord& expected = spans[0];
  EXPECT_EQ(one(span, 1).bytes, bytes_of(expected.trace_id.data(), 16));
  EXPECT_EQ(one(span, 2).bytes, bytes_of(expected.span_id.data(), 8));
  EXPECT_EQ(one(span, 3).bytes, "vendor=x");
  EXPECT_EQ(one(span, 4).bytes, bytes_of(expected.parent_span_id.data(), 8));
  EXPECT_EQ(one(span, 5).bytes, "POST /v1/chat/completions");
  EXPECT_EQ(one(span, 6).wire_type, 0);
  EXPECT_EQ(one(span, 6).integer, 2u);  // SPAN_KIND_SERVER
  EXPECT_EQ(one(span, 7).wire_type, 1);
  EXPECT_EQ(one(span, 7).integer, 1'700'000'000'123'456'789u);
  EXPECT_EQ(one(span, 8).integer, 1'700'000'000'223'456'789u);
  EXPECT_EQ(one(span, 16).wire_type, 5);
  EXPECT_EQ(one(span, 16).integer & 0xff, 1u);  // the sampled trace flag

  auto attributes = attributes_of(span, 9);
  EXPECT_EQ(one(attributes.at("http.route"), 1).bytes, "/v1/chat/completions");
  EXPECT_EQ(one(attributes.at("gen_ai.usage.input_tokens"), 3).integer, 42u);
  // int64 as a varint: two's complement over ten bytes.
  EXPECT_EQ(static_cast<int64_t>(one(attributes.at("negative"), 3).integer), -3);
  double temperature;
  uint64_t bits = one(attributes.at("gen_ai.request.temperature"), 4).integer;
  std::memcpy(&temperature, &bits, sizeof temperature);
  EXPECT_EQ(temperature, 0.25);
  EXPECT_EQ(one(attributes.at("chatflow.stream"), 2).integer, 1u);
  auto array = read_message(one(attributes.at("gen_ai.response.finish_reasons"), 5).bytes);
  auto values = all(array, 1);
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(one(read_message(values[0].bytes), 1).bytes, "stop");
  EXPECT_EQ(one(read_message(values[1].bytes), 1).bytes, "length");

  auto status = read_message(one(span, 15).bytes);
  EXPECT_EQ(one(status, 2).bytes, "boom");
  EXPECT_EQ(one(status, 3).integer, 2u);  // STATUS_CODE_ERROR
}

TEST(OtlpEncoding, ARootSpanHasNoParentAndAnUnsetStatusNoStatusMessage) {
  SpanRecord span = sample_span();
  span.parent_span_id = {};
  span.status = SpanStatus::unset;
  span.trace_state.clear();
  std::vector<SpanRecord> spans{span};
  auto request = read_message(encode_export_request(SpanSource{}, spans));
  auto scope_spans = read_message(one(read_message(one(request, 1).bytes), 2).bytes);
  auto fields = read_message(one(scope_spans, 2).bytes);
  EXPECT_TRUE(all(fields, 4).empty());
  EXPECT_TRUE(all(fields, 3).empty());
  EXPECT_TRUE(all(fields, 15).empty());
}

TEST(OtlpEncoding, SpansKeepTheirOrderInOneScope) {
  std::vector<SpanRecord> spans(3, sample_span());
  spans[0].name = "first";
  spans[1].name = "second";
  spans[2].name = "third";
  auto request = read_message(encode_export_request(SpanSource{}, spans));
  auto scope_spans = read_message(one(read_message(one(request, 1).bytes), 2).bytes);
  auto encoded = all(scope_spans, 2);
  ASSERT_EQ(encoded.size(), 3u);
  EXPECT_EQ(one(read_message(encoded[0].bytes), 5).bytes, "first");
  EXPECT_EQ(one(read_message(encoded[1].bytes), 5).bytes, "second");
  EXPECT_EQ(one(read_message(encoded[2].bytes), 5).bytes, "third");
}

TEST(OtlpEncoding, LongValuesGetMultiByteLengthPrefixes) {
  SpanRecord span = sample_span();
  span.name = std::string(70000, 'n');  // a three-byte varint length
  std::vector<SpanRecord> spans{span};
  auto request = read_message(encode_export_request(SpanSource{}, spans));
  auto scope_spans = read_message(one(read_message(one(request, 1).bytes), 2).bytes);
  EXPECT_EQ(one(read_message(one(scope_spans, 2).bytes), 5).bytes.size(), 70000u);
}

}  // namespace
}  // namespace chatflow::tracing
