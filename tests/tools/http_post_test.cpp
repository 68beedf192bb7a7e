// The tool client's URL rules (http and https, every part checked, errors naming the URL), and
// its answers from loopback servers written here: over TLS with openssl-made certificates (a
// trusted CA, an unknown one, another name), and a trailer too large to hold.
#include "framework/tools/http_post.h"

#include <gtest/gtest.h>

#include "support/canned_http_server.h"
#include "support/test_certificates.h"

namespace chatflow::tools {
namespace {

using testing::CannedServer;

const char kOk[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
    "Connection: close\r\n\r\n{\"ok\":true}";

HttpOutcome post_to(const std::string& url, const net::TlsClientContext* tls = nullptr) {
  std::string error;
  auto endpoint = parse_http_url(url, error);
  EXPECT_TRUE(endpoint) << error;
  HttpPost post;
  post.endpoint = &*endpoint;
  post.body = "{}";
  post.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  post.tls = tls;
  return tools::post(post);
}

net::TlsClientContext trusting(const std::string& ca_file) {
  net::TlsClientOptions options;
  options.ca_file = ca_file;
  return net::TlsClientContext(options);
}

TEST(HttpUrl, HostPortAndTargetAreSplit) {
  std::string error;
  auto endpoint = parse_http_url("http://127.0.0.1:9100/weather?unit=c", error);
  ASSERT_TRUE(endpoint) << error;
  EXPECT_EQ(endpoint->host, "127.0.0.1");
  EXPECT_EQ(endpoint->port, "9100");
  EXPECT_EQ(endpoint->target, "/weather?unit=c");
}

TEST(HttpUrl, DefaultsArePortEightyAndTheRoot) {
  std::string error;
  auto endpoint = parse_http_url("http://tools.internal", error);
  ASSERT_TRUE(endpoint) << error;
  EXPECT_EQ(endpoint->port, "80");
  EXPECT_EQ(endpoint->target, "/");
  auto bracketed = parse_http_url("http://[::1]:8080/x", error);
  ASSERT_TRUE(bracketed) << error;
  EXPECT_EQ(bracketed->host, "::1");
  EXPECT_EQ(bracketed->port, "8080");
}

TEST(HttpUrl, HttpsIsTlsOnPort443UnlessGiven) {
  std::string error;
  auto endpoint = parse_http_url("https://api.example.com/v1/x", error);
  ASSERT_TRUE(endpoint) << error;
  EXPECT_TRUE(endpoint->tls);
  EXPECT_EQ(endpoint->host, "api.example.com");
  EXPECT_EQ(endpoint->port, "443");
  EXPECT_EQ(endpoint->target, "/v1/x");
  auto ported = parse_http_url("https://127.0.0.1:8443", error);
  ASSERT_TRUE(ported) << error;
  EXPECT_EQ(ported->port, "8443");
  EXPECT_FALSE(parse_http_url("http://api.example.com", error)->tls);
}

TEST(HttpUrl, MalformedUrlsAreRefused) {
  for (const char* url : {"ftp://x/", "http://", "http://:80/", "http://h:0/", "http://h:99999/",
                          "http://h:x/", "http://user@h/", "https://", "https://user@h/"}) {
    std::string error;
    EXPECT_FALSE(parse_http_url(url, error)) << url;
    EXPECT_NE(error.find(url), std::string::npos) << error;
  }
}

TEST(HttpPost, AnEndpointNobodyListensOnIsAConnectFailure) {
  std::string error;
  auto endpoint = parse_http_url("http://127.0.0.1:1/x", error);
  ASSERT_TRUE(endpoint);
  HttpPost post;
  post.endpoint = &*endpoint;
  post.body = "{}";
  post.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  HttpOutcome outcome = tools::post(post);
  EXPECT_EQ(outcome.kind, HttpOutcome::Kind::connect_failed) << outcome.error;
}

// A chunked answer whose trailer holds one field of 70 KiB: Beast's parser throws on it when
// nothing bounds the read buffer, which ended the caller's thread (and the process).
TEST(HttpPost, AnOversizedTrailerIsAFailedCallNotACrash) {
  CannedServer server(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Big\r\n\r\n"
      "2\r\nok\r\n0\r\nX-Big: " +
      std::string(70 * 1024, 'a') + "\r\n\r\n");
  HttpOutcome outcome = post_to("http://127.0.0.1:" + server.port() + "/x");
  EXPECT_EQ(outcome.kind, HttpOutcome::Kind::failed) << outcome.error;
  EXPECT_NE(outcome.error.find("header or trailer is longer than"), std::string::npos)
      << outcome.error;
}

TEST(HttpPost, AnOversizedHeaderIsAFailedCall) {
  CannedServer server("HTTP/1.1 200 OK\r\nX-Big: " + std::string(70 * 1024, 'a') +
                      "\r\nContent-Length: 2\r\n\r\nok");
  HttpOutcome outcome = post_to("http://127.0.0.1:" + server.port() + "/x");
  EXPECT_EQ(outcome.kind, HttpOutcome::Kind::failed) << outcome.error;
}

class HttpsPost : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (testing::TestCertificates::available()) certificates_ = new testing::TestCertificates();
  }
  static void TearDownTestSuite() {
    delete certificates_;
    certificates_ = nullptr;
  }
  void SetUp() override {
    if (!certificates_) GTEST_SKIP() << "openssl is not installed (apt-get install openssl)";
  }
  static testing::TestCertificates* certificates_;
};

testing::TestCertificates* HttpsPost::certificates_ = nullptr;

TEST_F(HttpsPost, ATrustedCertificateForTheHostAnswers) {
  CannedServer server(kOk, certificates_->server_certificate(), certificates_->server_key());
  net::TlsClientContext tls = trusting(certificates_->ca());
  for (const std::string host : {"localhost", "127.0.0.1"}) {
    HttpOutcome outcome = post_to("https://" + host + ":" + server.port() + "/x", &tls);
    ASSERT_EQ(outcome.kind, HttpOutcome::Kind::response) << host << ": " << outcome.error;
    EXPECT_EQ(outcome.status, 200);
    EXPECT_EQ(outcome.body, "{\"ok\":true}");
  }
}

TEST_F(HttpsPost, AnUnknownCaFailsTheCall) {
  CannedServer server(kOk, certificates_->server_certificate(), certificates_->server_key());
  const net::TlsClientContext other = trusting(certificates_->other_ca());
  for (const net::TlsClientContext* tls :
       {&other, static_cast<const net::TlsClientContext*>(nullptr)}) {
    HttpOutcome outcome = post_to("https://localhost:" + server.port() + "/x", tls);
    EXPECT_EQ(outcome.kind, HttpOutcome::Kind::failed) << outcome.error;
    EXPECT_NE(outcome.error.find("TLS handshake with localhost:" + server.port() +
                                 " failed: certificate verify failed"),
              std::string::npos)
        << outcome.error;
  }
}

TEST_F(HttpsPost, ACertificateForAnotherNameFailsTheCall) {
  CannedServer server(kOk, certificates_->elsewhere_certificate(), certificates_->elsewhere_key());
  net::TlsClientContext tls = trusting(certificates_->ca());
  HttpOutcome outcome = post_to("https://localhost:" + server.port() + "/x", &tls);
  EXPECT_EQ(outcome.kind, HttpOutcome::Kind::failed) << outcome.error;
  EXPECT_NE(outcome.error.find("the certificate is not for 'localhost'"), std::string::npos)
      << outcome.error;
}

TEST_F(HttpsPost, APlainServerIsNotSpokenToInPlainText) {
  CannedServer server(kOk);
  net::TlsClientContext tls = trusting(certificates_->ca());
  HttpOutcome outcome = post_to("https://localhost:" + server.port() + "/x", &tls);
  EXPECT_EQ(outcome.kind, HttpOutcome::Kind::failed) << outcome.error;
  EXPECT_NE(outcome.error.find("TLS handshake"), std::string::npos) << outcome.error;
}

}  // namespace
}  // namespace chatflow::tools
