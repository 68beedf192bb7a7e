#include "framework/server/access_log.h"

#include <atomic>
#include <chrono>
#include <ctime>

#include <boost/json.hpp>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace chatflow::server {
namespace {

// 2026-11-30T11:45:00.123Z
std::string utc_timestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char buffer[40];
  size_t length = std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &parts);
  std::snprintf(buffer + length, sizeof buffer - length, ".%03dZ",
                static_cast<int>(millis.count()));
  return buffer;
}

}  // namespace

AccessLog::AccessLog(const std::string& destination) {
  if (destination == "off") return;
  // A logger of our own, outside spdlog's registry: nothing global to name, lock or drop.
  spdlog::sink_ptr sink;
  if (destination == "stderr") {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else if (destination == "stdout") {
    sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(destination);
  }
  logger_ = std::make_shared<spdlog::logger>("access", std::move(sink));
  logger_->set_pattern("%v");
  logger_->flush_on(spdlog::level::info);
}

AccessLog::~AccessLog() = default;

void AccessLog::write(const AccessRecord& record) {
  if (!logger_) return;
  namespace json = boost::json;
  json::object line{
      {"time", utc_timestamp()},
      {"id", record.id},
      {"method", record.method},
      {"path", record.path},
      {"remote", record.remote},
      {"status", record.status},
      {"tenant", record.tenant},
      {"user", record.user},
      {"model", record.model},
      {"stream", record.stream},
      {"prompt_tokens", record.prompt_tokens},
      {"completion_tokens", record.completion_tokens},
      {"cached_tokens", record.cached_tokens},
      {"finish_reason",
       record.finish_reason.empty() ? json::value() : json::value(record.finish_reason)},
      {"error", record.error_code.empty() ? json::value() : json::value(record.error_code)}};
  if (!record.request_id.empty() && record.request_id != record.id)
    line["request_id"] = record.request_id;
  if (!record.peer.empty()) line["peer"] = record.peer;
  if (!record.scheme.empty()) line["scheme"] = record.scheme;
  if (!record.end_user.empty()) line["end_user"] = record.end_user;
  if (!record.annotations.empty()) {
    json::object notes;
    for (const auto& [key, value] : record.annotations)
      notes[key] = value;
    line["notes"] = std::move(notes);
  }
  // Milliseconds with three decimals, rather than Boost.JSON's exponent form of doubles.
  std::string text = json::serialize(line);
  text.pop_back();
  char timing[96];
  if (record.ttft_ms) {
    std::snprintf(timing, sizeof timing, ",\"ttft_ms\":%.3f,\"total_ms\":%.3f}", *record.ttft_ms,
                  record.total_ms);
  } else {
    std::snprintf(timing, sizeof timing, ",\"ttft_ms\":null,\"total_ms\":%.3f}", record.total_ms);
  }
  logger_->info(text + timing);
}

}  // namespace chatflow::server
