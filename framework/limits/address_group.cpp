#include "framework/limits/address_group.h"

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <cstdint>

namespace chatflow::limits {

std::string address_group(std::string_view address, int ipv6_prefix_bits) {
  std::string text(address);
  // A zone ("fe80::1%eth0") names an interface of this host, not a different client.
  if (size_t zone = text.find('%'); zone != std::string::npos) text.resize(zone);
  std::array<unsigned char, 16> bytes{};
  char printed[INET6_ADDRSTRLEN] = {};
  if (::inet_pton(AF_INET, text.c_str(), bytes.data()) == 1) {
    ::inet_ntop(AF_INET, bytes.data(), printed, sizeof printed);
    return std::string("v4:") + printed;
  }
  if (::inet_pton(AF_INET6, text.c_str(), bytes.data()) != 1) return {};
  constexpr std::array<unsigned char, 12> kMappedPrefix = {0, 0, 0, 0, 0,    0,
                                                           0, 0, 0, 0, 0xff, 0xff};
  if (std::equal(kMappedPrefix.begin(), kMappedPrefix.end(), bytes.begin())) {
    ::inet_ntop(AF_INET, bytes.data() + 12, printed, sizeof printed);
    return std::string("v4:") + printed;
  }
  int bits = std::clamp(ipv6_prefix_bits, 0, 128);
  for (int i = 0; i < 16; ++i) {
    int kept = std::clamp(bits - 8 * i, 0, 8);
    bytes[static_cast<size_t>(i)] &= static_cast<unsigned char>(0xff00u >> kept);
  }
  ::inet_ntop(AF_INET6, bytes.data(), printed, sizeof printed);
  return std::string("v6:") + printed + "/" + std::to_string(bits);
}

}  // namespace chatflow::limits
