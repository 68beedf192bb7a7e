// An upstream engine's base URL as the `upstream` resource reads it: "http://host[:port][/base]"
// or "https://...". The base path is kept so an engine behind a path prefix
// ("https://gw.example/llm") gets "/llm/v1/chat/completions".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow::upstream {

struct EndpointUrl {
  std::string text;  // as written, without a trailing '/'
  bool tls = false;
  std::string host;
  std::string port;       // "80" / "443" unless given
  std::string base_path;  // "" or "/prefix", never ending in '/'

  // What the Host header says: the host, with the port when it is not the scheme's default.
  std::string host_header() const;
};

// nullopt with `error` naming what is wrong (scheme, user information, host, port, a query).
std::optional<EndpointUrl> parse_endpoint_url(std::string_view url, std::string& error);

// "a, b,c" -> {"a", "b", "c"}: blank pieces dropped, spaces around each removed.
std::vector<std::string> split_endpoint_list(std::string_view text);

}  // namespace chatflow::upstream
