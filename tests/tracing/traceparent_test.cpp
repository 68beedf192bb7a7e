// W3C traceparent: what continues a caller's trace, what is ignored (a new trace, never an
// error), and the header the server sends on.
#include "framework/tracing/traceparent.h"

#include <gtest/gtest.h>

namespace chatflow::tracing {
namespace {

// The example of the W3C Trace Context recommendation.
constexpr const char* kExample = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(Traceparent, TheW3cExampleGivesItsIdsAndTheSampledFlag) {
  auto context = parse_traceparent(kExample);
  ASSERT_TRUE(context);
  EXPECT_EQ(to_hex(context->trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(to_hex(context->span_id), "00f067aa0ba902b7");
  EXPECT_TRUE(context->sampled);
}

TEST(Traceparent, FlagsWithoutTheSampledBitAreNotSampled) {
  auto context = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(context);
  EXPECT_FALSE(context->sampled);
  auto other_bits = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02");
  ASSERT_TRUE(other_bits);
  EXPECT_FALSE(other_bits->sampled);
}

TEST(Traceparent, MalformedValuesAreIgnored) {
  for (const char* value : {
           "", "garbage",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // v00 with more
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero span id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // forbidden version
           "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // not hex
           "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",    // wrong separators
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // a non-hex digit
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0z",    // bad flags
       }) {
    EXPECT_FALSE(parse_traceparent(value)) << "'" << value << "'";
  }
}

TEST(Traceparent, ALaterVersionMayAppendFieldsAfterADash) {
  auto context =
      parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future");
  ASSERT_TRUE(context);
  EXPECT_EQ(to_hex(context->span_id), "00f067aa0ba902b7");
  EXPECT_FALSE(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01future"));
}

TEST(Traceparent, TracestateIsKeptWhenPlausibleAndDroppedOtherwise) {
  auto kept = parse_traceparent(kExample, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->trace_state, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  auto too_long = parse_traceparent(kExample, std::string(600, 'a'));
  ASSERT_TRUE(too_long);
  EXPECT_EQ(too_long->trace_state, "");
  auto control = parse_traceparent(kExample, "a=b\x01");
  ASSERT_TRUE(control);
  EXPECT_EQ(control->trace_state, "");
}

TEST(Traceparent, FormattingWritesVersionZeroWithTheSampledFlag) {
  SpanContext context;
  context.trace_id = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                      0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
  context.span_id = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
  context.sampled = true;
  EXPECT_EQ(format_traceparent(context), kExample);
  context.sampled = false;
  EXPECT_EQ(format_traceparent(context), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
}

TEST(RequestTrace, AChildSpanNamesTheServerSpanAsItsParent) {
  SpanContext server;
  server.trace_id = random_trace_id();
  server.span_id = random_span_id();
  server.sampled = true;
  auto trace = std::make_shared<RequestTrace>(server, SpanId{});
  std::string header;
  {
    ChildSpan call = trace->start_child("POST /v1/chat/completions", SpanKind::client);
    header = call.traceparent();
    call.set_attribute("http.response.status_code", int64_t{200});
  }
  auto children = trace->take_children();
  ASSERT_EQ(children.size(), 1u);
  EXPECT_EQ(children[0].trace_id, server.trace_id);
  EXPECT_EQ(children[0].parent_span_id, server.span_id);
  EXPECT_EQ(children[0].kind, SpanKind::client);
  EXPECT_LE(children[0].start_unix_ns, children[0].end_unix_ns);
  // The header the callee continues: same trace, the child span as its parent.
  auto sent = parse_traceparent(header);
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->trace_id, server.trace_id);
  EXPECT_EQ(sent->span_id, children[0].span_id);
  EXPECT_TRUE(sent->sampled);
}

TEST(RequestTrace, AnUnsampledTraceRecordsNothingButStillPropagates) {
  SpanContext server;
  server.trace_id = random_trace_id();
  server.span_id = random_span_id();
  auto trace = std::make_shared<RequestTrace>(server, SpanId{});
  std::string header = trace->start_child("call", SpanKind::client).traceparent();
  EXPECT_TRUE(trace->take_children().empty());
  auto sent = parse_traceparent(header);
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->trace_id, server.trace_id);
  EXPECT_FALSE(sent->sampled);
}

}  // namespace
}  // namespace chatflow::tracing
