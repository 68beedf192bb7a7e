// The tool client's URL rules: plain http only, every part checked, errors naming the URL.
#include "framework/tools/http_post.h"

#include <gtest/gtest.h>

namespace chatflow::tools {
namespace {

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

TEST(HttpUrl, HttpsIsRefusedWithTheReason) {
  std::string error;
  EXPECT_FALSE(parse_http_url("https://api.example.com/x", error));
  EXPECT_NE(error.find("https is not supported"), std::string::npos) << error;
}

TEST(HttpUrl, MalformedUrlsAreRefused) {
  for (const char* url : {"ftp://x/", "http://", "http://:80/", "http://h:0/", "http://h:99999/",
                          "http://h:x/", "http://user@h/"}) {
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

}  // namespace
}  // namespace chatflow::tools
