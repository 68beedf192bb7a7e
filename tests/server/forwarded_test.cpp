#include "framework/server/forwarded.h"

#include <gtest/gtest.h>

#include "framework/server/http_framing.h"

namespace chatflow::server {
namespace {

namespace ip = boost::asio::ip;

TrustedProxies proxies(const std::vector<std::string>& networks) {
  std::string error;
  auto parsed = TrustedProxies::parse(networks, error);
  EXPECT_TRUE(parsed) << error;
  return parsed.value_or(TrustedProxies{});
}

TEST(TrustedProxies, ParsesCidrsAndSingleAddressesOfBothFamilies) {
  auto trusted = proxies({"10.0.0.0/8", "192.168.1.7", "fd00::/8", "::1"});
  EXPECT_TRUE(trusted.contains(ip::make_address("10.255.3.4")));
  EXPECT_FALSE(trusted.contains(ip::make_address("11.0.0.1")));
  EXPECT_TRUE(trusted.contains(ip::make_address("192.168.1.7")));
  EXPECT_FALSE(trusted.contains(ip::make_address("192.168.1.8")));
  EXPECT_TRUE(trusted.contains(ip::make_address("fd12:3456::1")));
  EXPECT_FALSE(trusted.contains(ip::make_address("fe80::1")));
  EXPECT_TRUE(trusted.contains(ip::make_address("::1")));
  // A v4 peer seen on a dual-stack socket is the same peer.
  EXPECT_TRUE(trusted.contains(ip::make_address("::ffff:10.1.2.3")));
}

TEST(TrustedProxies, PrefixBoundariesAreExact) {
  auto trusted = proxies({"172.16.0.0/12", "0.0.0.0/0"});
  EXPECT_TRUE(trusted.contains(ip::make_address("8.8.8.8")));  // /0: every v4 address
  EXPECT_FALSE(trusted.contains(ip::make_address("2001:db8::1")));
  auto narrow = proxies({"172.16.0.0/12"});
  EXPECT_TRUE(narrow.contains(ip::make_address("172.31.255.255")));
  EXPECT_FALSE(narrow.contains(ip::make_address("172.32.0.0")));
}

TEST(TrustedProxies, RejectsWhatIsNoCidrAndSaysWhy) {
  for (const std::string bad : {"10.0.0.0/33", "nginx", "10.0.0.0/", "10.0.0.0/8x", "::1/129"}) {
    std::string error;
    EXPECT_FALSE(TrustedProxies::parse({bad}, error)) << bad;
    EXPECT_NE(error.find("'" + bad + "'"), std::string::npos) << error;
  }
}

TEST(ResolveClient, UntrustedPeerIsTheClientWhateverItSends) {
  auto trusted = proxies({"127.0.0.1"});
  auto client = resolve_client(trusted, ip::make_address("203.0.113.9"), "198.51.100.1", "https");
  EXPECT_EQ(client.address, "203.0.113.9");
  EXPECT_EQ(client.scheme, "http");
  EXPECT_FALSE(client.forwarded);
}

TEST(ResolveClient, TrustedPeerNamesTheClientFromTheRight) {
  auto trusted = proxies({"127.0.0.1", "10.0.0.0/8"});
  // A client that sends its own X-Forwarded-For (1.1.1.1) cannot choose who it is: the last
  // untrusted hop before our proxies (198.51.100.7) is the client.
  auto client = resolve_client(trusted, ip::make_address("127.0.0.1"),
                               "1.1.1.1, 198.51.100.7, 10.0.0.5", "https");
  EXPECT_EQ(client.address, "198.51.100.7");
  EXPECT_EQ(client.scheme, "https");
  EXPECT_TRUE(client.forwarded);
}

TEST(ResolveClient, PortsAndBracketsAreTakenOff) {
  auto trusted = proxies({"127.0.0.1"});
  EXPECT_EQ(resolve_client(trusted, ip::make_address("127.0.0.1"), "198.51.100.7:5123", "").address,
            "198.51.100.7");
  EXPECT_EQ(resolve_client(trusted, ip::make_address("127.0.0.1"), "[2001:db8::5]:443", "").address,
            "2001:db8::5");
  EXPECT_EQ(resolve_client(trusted, ip::make_address("127.0.0.1"), "2001:db8::6", "").address,
            "2001:db8::6");
}

TEST(ResolveClient, GarbageStopsTheWalkAtTheLastGoodHop) {
  auto trusted = proxies({"127.0.0.1", "10.0.0.0/8"});
  auto client =
      resolve_client(trusted, ip::make_address("127.0.0.1"), "evil<script>, 10.0.0.9", "");
  EXPECT_EQ(client.address, "10.0.0.9");
  // Without the header the proxy itself is all we know.
  auto bare = resolve_client(trusted, ip::make_address("127.0.0.1"), "", "gopher");
  EXPECT_EQ(bare.address, "127.0.0.1");
  EXPECT_FALSE(bare.forwarded);
  EXPECT_EQ(bare.scheme, "http");
}

TEST(ResolveClient, TheSchemeIsTheOneAddedWithTheClientsAddress) {
  auto trusted = proxies({"127.0.0.1", "10.0.0.0/8"});
  auto peer = ip::make_address("127.0.0.1");
  // Both proxies appended to both fields: the client's hop (second from the right) was https,
  // whatever the client wrote at the left.
  auto client =
      resolve_client(trusted, peer, "1.1.1.1, 198.51.100.7, 10.0.0.5", "http, https, http");
  EXPECT_EQ(client.address, "198.51.100.7");
  EXPECT_EQ(client.scheme, "https");
  // A proxy that set one value for the whole chain: that value.
  EXPECT_EQ(resolve_client(trusted, peer, "198.51.100.7, 10.0.0.5", "https").scheme, "https");
  // Over TLS without forwarding, the connection's own scheme.
  EXPECT_EQ(resolve_client(trusted, ip::make_address("203.0.113.9"), "", "", "https").scheme,
            "https");
}

TEST(UsableRequestId, KeepsPrintableIdsAndRefusesTheRest) {
  EXPECT_EQ(usable_request_id("req-0123_abc.9:z/+=@"), "req-0123_abc.9:z/+=@");
  EXPECT_FALSE(usable_request_id(""));
  EXPECT_FALSE(usable_request_id("has space"));
  EXPECT_FALSE(usable_request_id("line\r\nInjected: yes"));
  EXPECT_FALSE(usable_request_id(std::string(129, 'a')));
  EXPECT_TRUE(usable_request_id(std::string(128, 'a')));
}

TEST(JoinedFieldLines, EveryLineOfAListFieldInOrder) {
  boost::beast::http::request_header<> header;
  header.insert("X-Forwarded-For", "203.0.113.66");
  header.insert("Host", "x");
  header.insert("x-forwarded-for", "198.51.100.7, 10.0.0.5");
  EXPECT_EQ(joined_field_lines(header, "X-Forwarded-For"), "203.0.113.66, 198.51.100.7, 10.0.0.5");
  EXPECT_EQ(joined_field_lines(header, "X-Forwarded-Proto"), "");
}

}  // namespace
}  // namespace chatflow::server
