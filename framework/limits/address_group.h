// The bucket name of a client address for per-address limits. An IPv4 address is one client;
// an IPv6 client is its /64 by default, because one host or home usually gets a whole /64 and
// can pick any address in it (per address, it would have 2^64 buckets to spend).
#pragma once

#include <string>
#include <string_view>

namespace chatflow::limits {

// "v4:203.0.113.7", or "v6:2001:db8:1:2::/64" for any address in that /64 (with
// `ipv6_prefix_bits` = 64); an IPv4-mapped IPv6 address ("::ffff:203.0.113.7") is its IPv4
// address. Empty for anything that is not an IP address (a request that did not come over the
// network has no address, and is not limited by one).
std::string address_group(std::string_view address, int ipv6_prefix_bits = 64);

}  // namespace chatflow::limits
