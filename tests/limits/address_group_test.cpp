// Per-address buckets: an IPv4 client is its address, an IPv6 client its /64 (or the prefix
// configured), an IPv4-mapped IPv6 address its IPv4 address, and anything else no address.
#include "framework/limits/address_group.h"

#include <gtest/gtest.h>

namespace chatflow::limits {
namespace {

TEST(AddressGroup, Ipv4IsOneClientPerAddress) {
  EXPECT_EQ(address_group("203.0.113.7"), "v4:203.0.113.7");
  EXPECT_NE(address_group("203.0.113.7"), address_group("203.0.113.8"));
  EXPECT_EQ(address_group("::ffff:203.0.113.7"), "v4:203.0.113.7");
}

TEST(AddressGroup, Ipv6IsGroupedByItsPrefix) {
  EXPECT_EQ(address_group("2001:db8:1:2::1"), "v6:2001:db8:1:2::/64");
  EXPECT_EQ(address_group("2001:DB8:1:2:ffff:ffff:ffff:ffff"), "v6:2001:db8:1:2::/64");
  EXPECT_EQ(address_group("2001:db8:1:3::1"), "v6:2001:db8:1:3::/64");
  EXPECT_EQ(address_group("2001:db8:1:2:abcd::1", 72), "v6:2001:db8:1:2:ab00::/72");
  EXPECT_EQ(address_group("2001:db8:1:2::1", 128), "v6:2001:db8:1:2::1/128");
  EXPECT_EQ(address_group("fe80::1%eth0"), "v6:fe80::/64");
}

TEST(AddressGroup, WhatIsNoAddressHasNoGroup) {
  for (const char* text : {"", "localhost", "203.0.113.7:443", "[2001:db8::1]", "1.2.3", "::g"})
    EXPECT_EQ(address_group(text), "") << text;
}

}  // namespace
}  // namespace chatflow::limits
