// One JSON line per API request, through spdlog: who asked, what came back, how long it took.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spdlog {
class logger;
}

namespace chatflow::server {

struct AccessRecord {
  std::string id;
  std::string request_id;  // empty or the same as `id`: not logged twice
  std::string method;
  std::string path;
  std::string remote;  // the client (behind a trusted proxy: the forwarded address)
  std::string peer;    // the trusted proxy it came through; empty: none
  std::string scheme;  // as the proxy said the client used it; empty: none
  int status = 0;
  std::string tenant;
  std::string user;
  std::string end_user;  // the body's "user": the client's own label, not an identity
  std::string model;
  bool stream = false;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  std::optional<double> ttft_ms;
  double total_ms = 0;
  std::string finish_reason;  // empty: none (an error, or not a generation)
  std::string error_code;
  std::vector<std::pair<std::string, std::string>> annotations;  // stage notes (cache, arm...)
};

class AccessLog {
 public:
  // `destination`: stderr, stdout, off, or a file path (appended to). Throws spdlog's error when
  // the file cannot be opened.
  explicit AccessLog(const std::string& destination);
  ~AccessLog();
  void write(const AccessRecord& record);

 private:
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace chatflow::server
