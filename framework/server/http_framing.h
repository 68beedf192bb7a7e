// HTTP/1.1 request framing as this server reads it, as pure functions (the connection calls
// them; tests and the fuzzer call them without a socket).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/beast/http/message.hpp>

namespace chatflow::server {

// The path and query of an origin-form ("/v1/models?x=1") or absolute-form
// ("http://host/v1/models") request target, trailing slashes removed.
std::pair<std::string, std::string> split_target(std::string_view target);

// Every line of the list field `name` as one list (RFC 9110 section 5.3: lines of a field are
// one value joined by commas), in the order received; empty when absent.
std::string joined_field_lines(const boost::beast::http::request_header<>& header,
                               std::string_view name);

// RFC 9112 section 6.3: a request body is framed by Content-Length or by a Transfer-Encoding
// whose last coding is chunked; anything else could make this server and a proxy in front of it
// disagree on where the request ends (request smuggling). The refusal's status (400, or 501
// for a coding this server does not implement) and message; nullopt when the framing is sound.
std::optional<std::pair<int, std::string>> transfer_coding_problem(
    const boost::beast::http::request_header<>& header);

}  // namespace chatflow::server
