// Plain http goes only to this host: which hosts are this host.
#include "framework/security/loopback.h"

#include <gtest/gtest.h>

namespace chatflow::security {
namespace {

TEST(Loopback, OnlyThisHostsNamesAndAddressesAreLoopback) {
  for (const char* host : {"localhost", "LocalHost", "127.0.0.1", "127.1.2.3", "::1",
                           "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback_host(host)) << host;
  for (const char* host : {"", "example.com", "localhost.example.com", "10.0.0.1", "128.0.0.1",
                           "0.0.0.0", "::", "::ffff:10.0.0.1", "[::1]", "127.0.0.1.nip.io"})
    EXPECT_FALSE(is_loopback_host(host)) << host;
}

}  // namespace
}  // namespace chatflow::security
