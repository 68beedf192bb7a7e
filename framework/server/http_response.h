// A whole HTTP response as the server's handlers produce it, and the small helpers every part of
// the server shares (error envelopes, dates, ids). No sockets here: routes build these without
// a connection, so they can be tested without one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/api/request.h"

namespace chatflow::server {

struct Response {
  Response(int status, std::string body, std::string content_type = "application/json")
      : status(status), body(std::move(body)), content_type(std::move(content_type)) {}
  int status;
  std::string body;
  std::string content_type;
  HeaderFields headers;
};

RequestError make_error(int status, std::string type, std::string message, std::string code = {},
                        std::string param = {});
// The protocol a route speaks, so its errors come in that protocol's shape.
// Wire::responses (OpenAI's Responses API) answers errors in OpenAI's shape too.
enum class Wire { openai, anthropic, responses };

// The OpenAI error envelope (Anthropic's for Wire::anthropic) with the error's status.
Response error_response(const RequestError& error, Wire wire = Wire::openai);

std::string lowercase(std::string_view text);
// "chatcmpl-" + 24 random hex digits.
std::string random_id(std::string_view prefix);
int64_t unix_seconds();
// RFC 9110's IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date();
// The value of `name` in a URL query ("a=1&tenant=acme"), undecoded; empty when absent.
std::string query_value(std::string_view query, std::string_view name);

}  // namespace chatflow::server
