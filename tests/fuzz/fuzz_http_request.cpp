// libFuzzer target: arbitrary bytes as an HTTP/1.1 request, read the way a connection reads it:
// Beast's parser with the server's limits, then the framing checks (Transfer-Encoding), the
// target split, the route table, and for a complete body the OpenAI request parser. Every
// outcome must be a parse error, a refusal, or a request: never a crash or an unbounded read.
#include <cstdint>
#include <string>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "framework/api/request.h"
#include "framework/openai/openai_protocol.h"
#include "framework/server/http_framing.h"
#include "framework/server/routes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  using namespace chatflow;
  http::request_parser<http::string_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(1 << 20);
  parser.eager(true);
  boost::beast::error_code error;
  parser.put(boost::asio::buffer(data, size), error);
  if (!parser.is_header_done()) return 0;
  const auto& header = parser.get();
  auto problem = server::transfer_coding_problem(header);
  if (problem && problem->first != 400 && problem->first != 501) __builtin_trap();
  // Framing the server accepts with a Transfer-Encoding is exactly chunked framing.
  if (!problem && header.count(http::field::transfer_encoding) > 0 && !parser.chunked())
    __builtin_trap();
  auto [path, query] = server::split_target(header.target());
  if (path.size() > 1 && path.back() == '/') __builtin_trap();
  std::string parameter;
  const server::Route* route = server::find_route(path, parameter);
  if (error || !parser.is_done() || problem || !route) return 0;
  if (route->kind == server::RouteKind::generation) {
    Request request;
    try {
      openai::parse_completion_request(parser.get().body(), route->generation, request,
                                       {"fuzz-model"});
    } catch (const RequestFailure& failure) {
      if (failure.error().status != 400 && failure.error().status != 404) __builtin_trap();
    }
  }
  return 0;
}
