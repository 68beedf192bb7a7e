// The serve file: server.tracing off when absent, every key read, each mistake reported at its
// file:line:column; server.tls and the connection guards; every path relative to the file.
#include "framework/server/server_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "support/test_certificates.h"

namespace chatflow::server {
namespace {

class ServeFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = std::filesystem::temp_directory_path() /
              ("chatflow-serve-config-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(folder_);
    std::ofstream(folder_ / "pipeline.yaml") << "version: 1\n";
    unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }

  std::optional<ServeConfig> load(const std::string& server_yaml) {
    std::string path = (folder_ / "serve.yaml").string();
    std::ofstream(path) << "server:\n" << server_yaml << "pipeline: pipeline.yaml\n";
    diagnostics_ = Diagnostics();
    return load_serve_config(path, diagnostics_);
  }

  std::filesystem::path folder_;
  Diagnostics diagnostics_;
};

TEST_F(ServeFileTest, TracingIsOffWithoutTheKey) {
  auto config = load("  port: 0\n");
  ASSERT_TRUE(config) << diagnostics_.to_string();
  EXPECT_FALSE(config->server.tracing.enabled);
}

TEST_F(ServeFileTest, EveryTracingKeyIsRead) {
  auto config = load(
      "  tracing:\n"
      "    endpoint: http://127.0.0.1:4318/v1/traces\n"
      "    service_name: gateway\n"
      "    sampling_ratio: 0.25\n"
      "    max_queue_spans: 100\n"
      "    max_batch_spans: 10\n"
      "    export_interval_ms: 50\n"
      "    timeout_ms: 300\n"
      "    headers: {x-api-key: secret}\n");
  ASSERT_TRUE(config) << diagnostics_.to_string();
  const TracingSettings& tracing = config->server.tracing;
  EXPECT_TRUE(tracing.enabled);
  EXPECT_EQ(tracing.endpoint, "http://127.0.0.1:4318/v1/traces");
  EXPECT_EQ(tracing.service_name, "gateway");
  EXPECT_DOUBLE_EQ(tracing.sampling_ratio, 0.25);
  EXPECT_EQ(tracing.max_queue_spans, 100);
  EXPECT_EQ(tracing.max_batch_spans, 10);
  EXPECT_EQ(tracing.export_interval_ms, 50);
  EXPECT_EQ(tracing.timeout_ms, 300);
  EXPECT_EQ(tracing.headers.at("x-api-key"), "secret");
}

TEST_F(ServeFileTest, AnHttpsEndpointIsAcceptedAndItsCaFileChecked) {
  auto secure = load("  tracing:\n    endpoint: https://collector:4318/v1/traces\n");
  ASSERT_TRUE(secure) << diagnostics_.to_string();
  EXPECT_EQ(secure->server.tracing.endpoint, "https://collector:4318/v1/traces");
  EXPECT_TRUE(secure->server.tracing.ca_file.empty()) << "the system's trust store";

  EXPECT_FALSE(
      load("  tracing:\n    endpoint: https://collector:4318/v1/traces\n"
           "    ca_file: /nonexistent/ca.pem\n"));
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_EQ(diagnostics_.errors()[0].where.line, 4);
  EXPECT_NE(diagnostics_.errors()[0].message.find(
                "server.tracing.ca_file '/nonexistent/ca.pem' cannot be read"),
            std::string::npos)
      << diagnostics_.to_string();
}

TEST_F(ServeFileTest, ACaFileForAPlainHttpEndpointIsAnError) {
  EXPECT_FALSE(
      load("  tracing:\n    endpoint: http://collector:4318/v1/traces\n"
           "    ca_file: /etc/ssl/certs/ca-certificates.crt\n"));
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_EQ(diagnostics_.errors()[0].where.line, 4);
  EXPECT_NE(diagnostics_.errors()[0].message.find("not https://"), std::string::npos)
      << diagnostics_.to_string();
}

TEST_F(ServeFileTest, ARatioOutsideZeroToOneIsAnError) {
  EXPECT_FALSE(
      load("  tracing:\n    endpoint: http://127.0.0.1:4318/v1/traces\n    sampling_ratio: 1.5\n"));
  ASSERT_FALSE(diagnostics_.empty());
  EXPECT_EQ(diagnostics_.errors()[0].where.line, 4);
  EXPECT_NE(diagnostics_.errors()[0].message.find("sampling_ratio"), std::string::npos)
      << diagnostics_.to_string();
}

TEST_F(ServeFileTest, ABatchLargerThanTheQueueIsAnError) {
  EXPECT_FALSE(
      load("  tracing:\n    endpoint: http://127.0.0.1:4318/v1/traces\n    max_queue_spans: 10\n"
           "    max_batch_spans: 20\n"));
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_EQ(diagnostics_.errors()[0].where.line, 5);
  EXPECT_NE(diagnostics_.errors()[0].message.find("max_batch_spans (20)"), std::string::npos)
      << diagnostics_.to_string();
}

TEST_F(ServeFileTest, WithoutAnEndpointTheOpenTelemetryVariablesGiveIt) {
  EXPECT_FALSE(load("  tracing: {service_name: x}\n"));
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_NE(diagnostics_.errors()[0].message.find("needs an 'endpoint'"), std::string::npos);

  setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/", 1);
  auto from_base = load("  tracing: {service_name: x}\n");
  ASSERT_TRUE(from_base) << diagnostics_.to_string();
  EXPECT_EQ(from_base->server.tracing.endpoint, "http://127.0.0.1:4318/v1/traces");

  setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9999/traces", 1);
  auto from_traces = load("  tracing: {service_name: x}\n");
  ASSERT_TRUE(from_traces) << diagnostics_.to_string();
  EXPECT_EQ(from_traces->server.tracing.endpoint, "http://127.0.0.1:9999/traces");
  unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
}

TEST_F(ServeFileTest, TlsIsOffWithoutTheKeyAndItsFilesAreRelativeToTheServeFile) {
  auto plain = load("  port: 0\n");
  ASSERT_TRUE(plain) << diagnostics_.to_string();
  EXPECT_FALSE(plain->server.tls.enabled);
  auto config = load("  tls: {certificate_file: certs/server.pem, key_file: /etc/x/server.key}\n");
  ASSERT_TRUE(config) << diagnostics_.to_string();
  EXPECT_TRUE(config->server.tls.enabled);
  EXPECT_EQ(config->server.tls.certificate_file, (folder_ / "certs/server.pem").string());
  EXPECT_EQ(config->server.tls.key_file, "/etc/x/server.key");
  EXPECT_EQ(config->server.tls.client_ca_file, "");
}

TEST_F(ServeFileTest, TlsWithoutAKeyFileIsAnErrorAtItsLine) {
  EXPECT_FALSE(load("  tls:\n    certificate_file: server.pem\n"));
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_EQ(diagnostics_.errors()[0].where.line, 3);
  EXPECT_NE(diagnostics_.errors()[0].message.find("key_file"), std::string::npos)
      << diagnostics_.to_string();
}

TEST_F(ServeFileTest, ConnectionGuardsAreReadAndRangeChecked) {
  auto config = load(
      "  header_timeout_s: 2.5\n  body_timeout_s: 30\n  anonymous_connection_share: 0.25\n"
      "  sse_heartbeat_ms: 0\n  max_stream_backlog_bytes: 1048576\n");
  ASSERT_TRUE(config) << diagnostics_.to_string();
  EXPECT_DOUBLE_EQ(config->server.header_timeout_s, 2.5);
  EXPECT_DOUBLE_EQ(config->server.body_timeout_s, 30);
  EXPECT_DOUBLE_EQ(config->server.anonymous_connection_share, 0.25);
  EXPECT_EQ(config->server.sse_heartbeat_ms, 0);
  EXPECT_EQ(config->server.max_stream_backlog_bytes, 1048576);
  EXPECT_FALSE(load("  port: 0\n  anonymous_connection_share: 1.5\n"));
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_EQ(diagnostics_.errors()[0].where.line, 3);
  EXPECT_NE(diagnostics_.errors()[0].message.find("anonymous_connection_share"), std::string::npos)
      << diagnostics_.to_string();
}

// Wherever chatflow runs, every path in a serve file is read relative to the file: the tracing
// CA (checked at its line, so found only there), an access log file and the web root, as the
// pipeline and server.tls's files are.
TEST_F(ServeFileTest, EveryPathIsRelativeToTheServeFile) {
  if (!testing::TestCertificates::available()) GTEST_SKIP() << "openssl is not installed";
  testing::TestCertificates certificates;
  std::filesystem::create_directories(folder_ / "certs");
  std::filesystem::copy_file(certificates.ca(), folder_ / "certs" / "ca.pem");
  auto config = load(
      "  access_log: logs/access.log\n"
      "  web_root: site\n"
      "  tracing: {endpoint: \"https://collector:4318/v1/traces\", ca_file: certs/ca.pem}\n");
  ASSERT_TRUE(config) << diagnostics_.to_string();
  EXPECT_EQ(config->server.access_log, (folder_ / "logs" / "access.log").string());
  EXPECT_EQ(config->server.web_root, (folder_ / "site").string());
  EXPECT_EQ(config->server.tracing.ca_file, (folder_ / "certs" / "ca.pem").string());
  EXPECT_EQ(config->pipeline, (folder_ / "pipeline.yaml").string());
}

TEST_F(ServeFileTest, AbsolutePathsTheLogStreamsAndAnEmptyWebRootStayAsWritten) {
  for (std::string sink : {"stderr", "stdout", "off"}) {
    auto config = load("  access_log: " + sink + "\n");
    ASSERT_TRUE(config) << diagnostics_.to_string();
    EXPECT_EQ(config->server.access_log, sink);
    EXPECT_EQ(config->server.web_root, "") << "empty: the web folder beside the executable";
  }
  auto config = load("  access_log: /var/log/chatflow/access.log\n  web_root: /srv/chatflow/web\n");
  ASSERT_TRUE(config) << diagnostics_.to_string();
  EXPECT_EQ(config->server.access_log, "/var/log/chatflow/access.log");
  EXPECT_EQ(config->server.web_root, "/srv/chatflow/web");
}

}  // namespace
}  // namespace chatflow::server
