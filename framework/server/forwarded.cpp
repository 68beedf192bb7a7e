#include "framework/server/forwarded.h"

#include <algorithm>
#include <cctype>

#include <boost/asio/ip/address_v6.hpp>

namespace chatflow::server {
namespace {

namespace ip = boost::asio::ip;

ip::address_v6 as_v6(const ip::address& address) {
  if (address.is_v6()) return address.to_v6();
  return ip::make_address_v6(ip::v4_mapped, address.to_v4());
}

bool same_prefix(const ip::address_v6& a, const ip::address_v6& b, int bits) {
  auto left = a.to_bytes();
  auto right = b.to_bytes();
  for (int i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    unsigned mask = bits >= 8 ? 0xffu : (0xffu << (8 - bits)) & 0xffu;
    if ((left[static_cast<size_t>(i)] & mask) != (right[static_cast<size_t>(i)] & mask))
      return false;
  }
  return true;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

// One X-Forwarded-For element: an address, perhaps "[v6]:port" or "v4:port" as some proxies
// write it.
std::optional<ip::address> forwarded_address(std::string_view element) {
  element = trim(element);
  if (!element.empty() && element.front() == '[') {
    size_t close = element.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    element = element.substr(1, close - 1);
  } else if (std::count(element.begin(), element.end(), ':') == 1) {
    element = element.substr(0, element.find(':'));
  }
  boost::system::error_code error;
  auto address = ip::make_address(std::string(element), error);
  if (error) return std::nullopt;
  if (address.is_v6() && address.to_v6().is_v4_mapped())
    return ip::make_address_v4(ip::v4_mapped, address.to_v6());
  return address;
}

}  // namespace

std::optional<TrustedProxies> TrustedProxies::parse(const std::vector<std::string>& networks,
                                                    std::string& error) {
  TrustedProxies proxies;
  for (const auto& text : networks) {
    std::string address_text = text;
    int prefix = -1;
    if (size_t slash = text.find('/'); slash != std::string::npos) {
      address_text = text.substr(0, slash);
      std::string bits = text.substr(slash + 1);
      if (bits.empty() || bits.size() > 3 ||
          !std::all_of(bits.begin(), bits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        error = "'" + text + "' is not a CIDR: expected ADDRESS/BITS, e.g. 10.0.0.0/8";
        return std::nullopt;
      }
      prefix = std::stoi(bits);
    }
    boost::system::error_code parse_error;
    auto address = ip::make_address(address_text, parse_error);
    if (parse_error) {
      error = "'" + text + "' is not an IP address or CIDR (e.g. 10.0.0.0/8, 127.0.0.1, ::1/128)";
      return std::nullopt;
    }
    int family_bits = address.is_v4() ? 32 : 128;
    if (prefix < 0) prefix = family_bits;
    if (prefix > family_bits) {
      error = "'" + text + "': a prefix of " + std::to_string(prefix) + " bits is longer than an " +
              (address.is_v4() ? "IPv4" : "IPv6") + " address";
      return std::nullopt;
    }
    proxies.networks_.push_back(
        {ip::address(as_v6(address)), address.is_v4() ? 96 + prefix : prefix});
  }
  return proxies;
}

bool TrustedProxies::contains(const ip::address& address) const {
  ip::address_v6 candidate = as_v6(address);
  return std::any_of(networks_.begin(), networks_.end(), [&](const Network& network) {
    return same_prefix(candidate, network.base.to_v6(), network.prefix_bits);
  });
}

ClientAddress resolve_client(const TrustedProxies& proxies, const ip::address& peer,
                             std::string_view forwarded_for, std::string_view forwarded_proto,
                             std::string_view connection_scheme) {
  ip::address client = peer;
  if (client.is_v6() && client.to_v6().is_v4_mapped())
    client = ip::make_address_v4(ip::v4_mapped, client.to_v6());
  ClientAddress result{client.to_string(), std::string(connection_scheme), false};
  if (!proxies.contains(client)) return result;

  // Right to left: the nearest proxy appended the last element.
  size_t hops = 0;
  std::string_view rest = forwarded_for;
  while (!rest.empty()) {
    size_t comma = rest.rfind(',');
    std::string_view element = comma == std::string_view::npos ? rest : rest.substr(comma + 1);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(0, comma);
    auto address = forwarded_address(element);
    // Garbage in the chain: nothing to its left can be trusted, so the last good hop stands.
    if (!address) break;
    client = *address;
    result.address = client.to_string();
    result.forwarded = true;
    ++hops;
    if (!proxies.contains(client)) break;
  }

  // The scheme the client used: where every proxy appends to X-Forwarded-Proto as to
  // X-Forwarded-For, the element of the proxy that added the client's address (as many from the
  // right); where fewer are given, the proxies pass on the first one's, so the first.
  std::vector<std::string_view> schemes;
  for (std::string_view list = forwarded_proto; !list.empty();) {
    size_t comma = list.find(',');
    schemes.push_back(trim(list.substr(0, comma)));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  if (schemes.empty()) return result;
  std::string_view scheme;
  if (hops == 0) {
    scheme = schemes.back();  // no client named: what the nearest proxy says of its own client
  } else {
    scheme = schemes.size() >= hops ? schemes[schemes.size() - hops] : schemes.front();
  }
  if (scheme == "https" || scheme == "http") result.scheme = std::string(scheme);
  return result;
}

std::optional<std::string> usable_request_id(std::string_view value) {
  if (value.empty() || value.size() > 128) return std::nullopt;
  for (char c : value) {
    bool allowed = std::isalnum(static_cast<unsigned char>(c)) ||
                   std::string_view("-_.:/+=@").find(c) != std::string_view::npos;
    if (!allowed) return std::nullopt;
  }
  return std::string(value);
}

}  // namespace chatflow::server
