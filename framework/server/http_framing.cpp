#include "framework/server/http_framing.h"

#include <vector>

#include "framework/server/http_response.h"

namespace chatflow::server {

namespace http = boost::beast::http;

// The path and query of an origin-form ("/v1/models?x=1") or absolute-form
// ("http://host/v1/models") request target, trailing slashes removed.
std::pair<std::string, std::string> split_target(std::string_view target) {
  if (target.starts_with("http://") || target.starts_with("https://")) {
    size_t authority = target.find("//") + 2;
    size_t path = target.find_first_of("/?", authority);
    target = path == std::string_view::npos ? std::string_view("/") : target.substr(path);
    if (target.starts_with('?')) target = "/";
  }
  size_t question = target.find('?');
  std::string path(target.substr(0, question));
  std::string query =
      question == std::string_view::npos ? std::string() : std::string(target.substr(question + 1));
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  return {path, query};
}

std::string joined_field_lines(const http::request_header<>& header, std::string_view name) {
  std::string joined;
  auto [first, last] = header.equal_range(name);
  for (auto field = first; field != last; ++field) {
    if (!joined.empty()) joined += ", ";
    joined += field->value();
  }
  return joined;
}

// RFC 9112 section 6.3: a request body is framed by Content-Length or by a Transfer-Encoding
// whose last coding is chunked; anything else could make this server and a proxy in front of it
// disagree on where the request ends (request smuggling). The refusal's status and message.
std::optional<std::pair<int, std::string>> transfer_coding_problem(
    const http::request_header<>& header) {
  std::vector<std::string> codings;
  bool present = false;
  for (const auto& field : header) {
    if (field.name() != http::field::transfer_encoding) continue;
    present = true;
    std::string_view list = field.value();
    while (!list.empty()) {
      size_t comma = list.find(',');
      std::string coding = lowercase(list.substr(0, comma));
      coding.erase(0, coding.find_first_not_of(" \t"));
      coding.erase(coding.find_last_not_of(" \t") + 1);
      if (!coding.empty()) codings.push_back(coding);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
  }
  if (!present) return std::nullopt;
  if (header.version() < 11) {
    return std::pair{400, std::string("Transfer-Encoding is not allowed in an HTTP/1.0 request")};
  }
  if (header.count(http::field::content_length) > 0) {
    return std::pair{400, std::string("a request may not carry both Content-Length and "
                                      "Transfer-Encoding")};
  }
  if (codings.empty() || codings.back() != "chunked") {
    return std::pair{400, std::string("the last transfer coding of a request must be chunked")};
  }
  for (size_t i = 0; i + 1 < codings.size(); ++i) {
    if (codings[i] == "chunked") {
      return std::pair{400, std::string("chunked may be applied only once")};
    }
    return std::pair{501, "the transfer coding '" + codings[i] +
                              "' is not supported (send the body with chunked alone)"};
  }
  return std::nullopt;
}

}  // namespace chatflow::server
