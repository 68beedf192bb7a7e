// The exporter's bounds: a request's spans are queued whole or dropped whole, and spans that
// cannot reach a collector are counted, never waited for.
#include "framework/tracing/span_exporter.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <gtest/gtest.h>

namespace chatflow::tracing {
namespace {

// A loopback port nobody listens on: bound, then closed.
std::string closed_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  return std::to_string(acceptor.local_endpoint().port());
}

ExporterSettings unreachable(size_t max_queue, size_t max_batch) {
  ExporterSettings settings;
  settings.endpoint = tools::HttpEndpoint{"127.0.0.1", closed_port(), "/v1/traces"};
  settings.url = "http://127.0.0.1:" + settings.endpoint.port + "/v1/traces";
  settings.max_queue_spans = max_queue;
  settings.max_batch_spans = max_batch;
  // Nothing is sent before shutdown: the batch size is not reached and the interval is long.
  settings.export_interval = std::chrono::hours(1);
  settings.timeout = std::chrono::milliseconds(500);
  return settings;
}

std::vector<SpanRecord> spans(size_t count) {
  return std::vector<SpanRecord>(count);
}

TEST(SpanExporter, ARequestsSpansThatDoNotFitAreDroppedWhole) {
  SpanExporter exporter(unreachable(5, 10));
  exporter.offer(spans(3));
  exporter.offer(spans(3));  // 6 > 5: all three dropped, none of the first three
  EXPECT_EQ(exporter.dropped_spans(), 3u);
  exporter.offer(spans(2));  // fits exactly
  EXPECT_EQ(exporter.dropped_spans(), 3u);
  exporter.offer(spans(1));
  EXPECT_EQ(exporter.dropped_spans(), 4u);
}

TEST(SpanExporter, SpansThatCannotReachTheCollectorAreCountedAtShutdown) {
  SpanExporter exporter(unreachable(100, 50));
  exporter.offer(spans(4));
  exporter.offer(spans(3));
  exporter.shutdown();
  EXPECT_EQ(exporter.exported_spans(), 0u);
  EXPECT_EQ(exporter.dropped_spans(), 7u);
  EXPECT_GE(exporter.failed_exports(), 1u);
  exporter.offer(spans(2));  // after shutdown: dropped, not queued for ever
  EXPECT_EQ(exporter.dropped_spans(), 9u);
}

}  // namespace
}  // namespace chatflow::tracing
