#include "framework/upstream/endpoint_url.h"

#include <gtest/gtest.h>

namespace chatflow::upstream {
namespace {

TEST(EndpointUrl, PlainHostPortAndBasePath) {
  std::string error;
  auto url = parse_endpoint_url("http://10.0.0.5:8000/", error);
  ASSERT_TRUE(url) << error;
  EXPECT_FALSE(url->tls);
  EXPECT_EQ(url->host, "10.0.0.5");
  EXPECT_EQ(url->port, "8000");
  EXPECT_EQ(url->base_path, "");
  EXPECT_EQ(url->text, "http://10.0.0.5:8000");
  EXPECT_EQ(url->host_header(), "10.0.0.5:8000");

  url = parse_endpoint_url("https://api.example.com/llm/", error);
  ASSERT_TRUE(url) << error;
  EXPECT_TRUE(url->tls);
  EXPECT_EQ(url->port, "443");
  EXPECT_EQ(url->base_path, "/llm");
  EXPECT_EQ(url->host_header(), "api.example.com");

  url = parse_endpoint_url("http://[::1]:9000", error);
  ASSERT_TRUE(url) << error;
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->host_header(), "[::1]:9000");
}

TEST(EndpointUrl, RefusesWhatItCannotUse) {
  for (const char* bad :
       {"10.0.0.5:8000", "ftp://x", "http://", "http://:80", "http://x:0", "http://x:70000",
        "http://x:port", "http://u:p@x", "http://x/?q=1", "http://[::1"}) {
    std::string error;
    EXPECT_FALSE(parse_endpoint_url(bad, error)) << bad;
    EXPECT_NE(error.find(bad), std::string::npos) << "the message names the value: " << error;
  }
}

TEST(EndpointUrl, SplitsACommaSeparatedList) {
  EXPECT_EQ(split_endpoint_list(" http://a:1, http://b:2 ,,http://c:3 "),
            (std::vector<std::string>{"http://a:1", "http://b:2", "http://c:3"}));
  EXPECT_TRUE(split_endpoint_list(" , ").empty());
}

}  // namespace
}  // namespace chatflow::upstream
