#include "framework/upstream/endpoint_url.h"

#include <charconv>

namespace chatflow::upstream {

std::string EndpointUrl::host_header() const {
  bool default_port = (tls && port == "443") || (!tls && port == "80");
  std::string name = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return default_port ? name : name + ":" + port;
}

std::optional<EndpointUrl> parse_endpoint_url(std::string_view url, std::string& error) {
  auto fail = [&](const std::string& why) -> std::optional<EndpointUrl> {
    error = "'" + std::string(url) + "': " + why;
    return std::nullopt;
  };
  EndpointUrl endpoint;
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
    endpoint.port = "80";
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
    endpoint.tls = true;
    endpoint.port = "443";
  } else {
    return fail("expected an http:// or https:// base URL (e.g. http://10.0.0.5:8000)");
  }
  while (!rest.empty() && rest.back() == '/')
    rest.remove_suffix(1);
  if (rest.find_first_of("?#") != std::string_view::npos)
    return fail("a base URL takes no query or fragment");
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) endpoint.base_path = std::string(rest.substr(slash));
  if (authority.find('@') != std::string_view::npos)
    return fail("user information in the URL is not supported (use api_key)");
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    size_t bracket = authority.find(']');
    if (bracket == std::string_view::npos) return fail("an IPv6 host needs its closing ']'");
    host = authority.substr(1, bracket - 1);
    std::string_view after = authority.substr(bracket + 1);
    if (!after.empty() && after.front() != ':') return fail("unexpected text after ']'");
    if (!after.empty()) port = after.substr(1);
    if (after == ":") return fail("the port must be a number from 1 to 65535");
  } else if (size_t colon = authority.find(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty()) return fail("the port must be a number from 1 to 65535");
  }
  if (host.empty()) return fail("the URL names no host");
  if (!port.empty()) {
    unsigned number = 0;
    auto [end, status] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (status != std::errc() || end != port.data() + port.size() || number == 0 ||
        number > 65535) {
      return fail("the port must be a number from 1 to 65535");
    }
    endpoint.port = std::string(port);
  }
  endpoint.host = std::string(host);
  endpoint.text = (endpoint.tls ? "https://" : "http://") + std::string(rest);
  return endpoint;
}

std::vector<std::string> split_endpoint_list(std::string_view text) {
  std::vector<std::string> pieces;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view piece = text.substr(start, comma - start);
    while (!piece.empty() && (piece.front() == ' ' || piece.front() == '\t'))
      piece.remove_prefix(1);
    while (!piece.empty() && (piece.back() == ' ' || piece.back() == '\t'))
      piece.remove_suffix(1);
    if (!piece.empty()) pieces.emplace_back(piece);
    start = comma + 1;
  }
  return pieces;
}

}  // namespace chatflow::upstream
