// The exporter's bounds: a request's spans are queued whole or dropped whole, and spans that
// cannot reach a collector are counted, never waited for; a collector over https is verified,
// and one answering with a trailer too large to hold is a failed export, not a crash.
#include "framework/tracing/span_exporter.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <gtest/gtest.h>

#include "support/canned_http_server.h"
#include "support/test_certificates.h"

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

// Sends once, at shutdown.
ExporterSettings collector_at(const std::string& url, const std::string& ca_file = {}) {
  ExporterSettings settings;
  std::string error;
  settings.endpoint = *tools::parse_http_url(url, error);
  settings.url = url;
  settings.ca_file = ca_file;
  settings.export_interval = std::chrono::hours(1);
  settings.timeout = std::chrono::seconds(5);
  return settings;
}

const char kAccepted[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

TEST(SpanExporter, ACollectorAnsweringWithAnOversizedTrailerIsAFailedExport) {
  testing::CannedServer collector(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Big: " +
      std::string(70 * 1024, 'a') + "\r\n\r\n");
  SpanExporter exporter(collector_at("http://127.0.0.1:" + collector.port() + "/v1/traces"));
  exporter.offer(spans(3));
  exporter.shutdown();
  EXPECT_EQ(collector.answered(), 1);
  EXPECT_EQ(exporter.exported_spans(), 0u);
  EXPECT_EQ(exporter.dropped_spans(), 3u);
  EXPECT_EQ(exporter.failed_exports(), 1u);
}

TEST(SpanExporter, AnHttpsCollectorIsVerifiedAgainstTheCaFile) {
  if (!testing::TestCertificates::available()) GTEST_SKIP() << "openssl is not installed";
  testing::TestCertificates certificates;
  testing::CannedServer collector(kAccepted, certificates.server_certificate(),
                                  certificates.server_key());
  std::string url = "https://localhost:" + collector.port() + "/v1/traces";

  SpanExporter trusting(collector_at(url, certificates.ca()));
  trusting.offer(spans(2));
  trusting.shutdown();
  EXPECT_EQ(trusting.exported_spans(), 2u);
  EXPECT_EQ(trusting.failed_exports(), 0u);

  SpanExporter untrusting(collector_at(url, certificates.other_ca()));
  untrusting.offer(spans(2));
  untrusting.shutdown();
  EXPECT_EQ(untrusting.exported_spans(), 0u);
  EXPECT_EQ(untrusting.dropped_spans(), 2u);
  EXPECT_EQ(untrusting.failed_exports(), 1u);
  EXPECT_EQ(collector.answered(), 1) << "the untrusted exporter sent nothing";
}

TEST(SpanExporter, AnUnreadableCaFileIsRefusedAtConstruction) {
  EXPECT_THROW(
      SpanExporter(collector_at("https://localhost:4318/v1/traces", "/nonexistent/ca.pem")),
      net::TlsError);
}

}  // namespace
}  // namespace chatflow::tracing
