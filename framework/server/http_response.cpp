#include "framework/server/http_response.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>

#include "framework/anthropic/messages_protocol.h"
#include "framework/openai/openai_protocol.h"

namespace chatflow::server {

RequestError make_error(int status, std::string type, std::string message, std::string code,
                        std::string param) {
  return RequestError{status, std::move(type), std::move(message), std::move(code),
                      std::move(param)};
}

Response error_response(const RequestError& error, Wire wire) {
  return Response(error.status, wire == Wire::anthropic ? anthropic::error_json(error)
                                                        : openai::error_json(error));
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string id(prefix);
  for (int i = 0; i < 24; ++i)
    id += kDigits[generator() & 15];
  return id;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string http_date() {
  std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char buffer[64];
  std::strftime(buffer, sizeof buffer, "%a, %d %b %Y %H:%M:%S GMT", &parts);
  return buffer;
}

std::string query_value(std::string_view query, std::string_view name) {
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    std::string_view pair = query.substr(start, end - start);
    if (pair.size() > name.size() && pair.substr(0, name.size()) == name &&
        pair[name.size()] == '=') {
      return std::string(pair.substr(name.size() + 1));
    }
    start = end + 1;
  }
  return {};
}

}  // namespace chatflow::server
