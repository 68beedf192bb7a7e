// Sends finished spans to an OpenTelemetry collector over OTLP/HTTP (protobuf; https verified
// against `ca_file` or the system's trust store), in batches, from one background thread. The
// request path only queues: offer() takes a lock for a vector append and never waits on the
// network. When the queue is full (a slow or absent collector) or an export fails, those spans are
// dropped and counted, and a warning is logged at most every 10 seconds.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "framework/api/trace.h"
#include "framework/tools/http_post.h"
#include "framework/tracing/otlp_encoding.h"

namespace chatflow::tracing {

struct ExporterSettings {
  std::string url;  // for messages
  tools::HttpEndpoint endpoint;
  std::string ca_file;  // https: the collector's CA certificates (PEM); empty: the system's
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. a collector's API key
  SpanSource source;
  size_t max_queue_spans = 4096;
  size_t max_batch_spans = 512;
  std::chrono::milliseconds export_interval{1000};
  // One export's whole exchange; also how long shutdown() may spend sending what is queued.
  std::chrono::milliseconds timeout{2000};
};

class SpanExporter {
 public:
  // Throws net::TlsError when an https endpoint's ca_file cannot be used.
  explicit SpanExporter(ExporterSettings settings);
  // shutdown(), if it was not called.
  ~SpanExporter();
  SpanExporter(const SpanExporter&) = delete;
  SpanExporter& operator=(const SpanExporter&) = delete;

  // Queues the spans of one request, all or none (a tree with holes misleads more than a
  // missing one): dropped and counted when they do not fit. Never blocks on the collector.
  void offer(std::vector<SpanRecord> spans);

  // Sends what is queued, within settings.timeout, then stops the thread; spans still queued
  // then are counted as dropped. Later offers are dropped.
  void shutdown();

  uint64_t exported_spans() const { return exported_.load(std::memory_order_relaxed); }
  uint64_t dropped_spans() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t failed_exports() const { return failed_exports_.load(std::memory_order_relaxed); }

 private:
  void run();
  // Posts `batch`; counts it exported or dropped.
  void export_batch(const std::vector<SpanRecord>& batch,
                    std::chrono::steady_clock::time_point deadline);
  void count_dropped(size_t spans, const std::string& why);

  ExporterSettings settings_;
  std::optional<net::TlsClientContext> tls_;  // https endpoints
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<SpanRecord> queue_;
  bool stopping_ = false;
  std::atomic<uint64_t> exported_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> failed_exports_{0};
  std::mutex warning_mutex_;
  std::chrono::steady_clock::time_point last_warning_{};
  uint64_t dropped_since_warning_ = 0;
  std::thread thread_;
};

}  // namespace chatflow::tracing
