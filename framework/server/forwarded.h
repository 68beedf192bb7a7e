// Who the client is behind a proxy. A connection's peer is the client unless it is one of
// server.trusted_proxies; then X-Forwarded-For names it: read from the right, every address a
// trusted proxy added is skipped and the first one that is not trusted is the client (what
// nginx's real_ip_recursive does), so a client cannot pass itself off as anyone by sending the
// header itself. X-Forwarded-Proto is believed from a trusted peer only, its element matched to
// the client's X-Forwarded-For element when proxies append to both. Every line of either field
// counts (a proxy may add a line of its own instead of extending the client's).
//
// X-Request-Id: a caller's id is kept when it is short printable ASCII (it then names the
// request in the response, the access log and the trace); anything else is replaced.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ip/address.hpp>

namespace chatflow::server {

class TrustedProxies {
 public:
  // `networks`: CIDRs ("10.0.0.0/8", "::1/128") or single addresses. nullopt and `error` set
  // for the first entry that is neither.
  static std::optional<TrustedProxies> parse(const std::vector<std::string>& networks,
                                             std::string& error);

  bool empty() const { return networks_.empty(); }
  bool contains(const boost::asio::ip::address& address) const;

 private:
  struct Network {
    boost::asio::ip::address base;  // v6 for both families (v4 mapped)
    int prefix_bits = 0;            // of the v6 form
  };
  std::vector<Network> networks_;
};

struct ClientAddress {
  std::string address;  // the client's IP
  std::string scheme;   // http or https, as the client used it
  bool forwarded = false;
};

// The client of a connection from `peer` that sent these X-Forwarded-For and -Proto values
// (every line of each joined by commas; empty when absent). `connection_scheme`: how the peer
// connected (https on a TLS address), the scheme when nothing forwarded says otherwise.
ClientAddress resolve_client(const TrustedProxies& proxies, const boost::asio::ip::address& peer,
                             std::string_view forwarded_for, std::string_view forwarded_proto,
                             std::string_view connection_scheme = "http");

// Where an exchange came from, as the access log and the trace record it.
struct ExchangeAddresses {
  std::string remote;  // the client: ip:port, or the forwarded ip behind a trusted proxy
  std::string peer;    // the trusted proxy's ip:port; empty when the client connected itself
  std::string scheme;  // what the proxy says the client used; empty when not forwarded
};

// The caller's X-Request-Id when it can be used as one (1..128 characters out of letters,
// digits and -_.:/+=@), else nullopt.
std::optional<std::string> usable_request_id(std::string_view value);

}  // namespace chatflow::server
