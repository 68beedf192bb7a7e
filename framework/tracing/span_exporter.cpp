#include "framework/tracing/span_exporter.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include <spdlog/spdlog.h>

namespace chatflow::tracing {
namespace {

constexpr auto kWarningInterval = std::chrono::seconds(10);

std::optional<net::TlsClientContext> tls_for(const ExporterSettings& settings) {
  if (!settings.endpoint.tls) return std::nullopt;
  net::TlsClientOptions options;
  options.ca_file = settings.ca_file;
  return net::TlsClientContext(options);
}

}  // namespace

SpanExporter::SpanExporter(ExporterSettings settings)
    : settings_(std::move(settings)), tls_(tls_for(settings_)), thread_([this] { run(); }) {}

SpanExporter::~SpanExporter() {
  shutdown();
}

void SpanExporter::offer(std::vector<SpanRecord> spans) {
  if (spans.empty()) return;
  size_t count = spans.size();
  bool full_batch = false;
  {
    std::lock_guard lock(mutex_);
    if (!stopping_ && queue_.size() + count <= settings_.max_queue_spans) {
      size_t before = queue_.size();
      std::move(spans.begin(), spans.end(), std::back_inserter(queue_));
      // Woken once as the queue reaches a batch, not for every request.
      full_batch = before < settings_.max_batch_spans && queue_.size() >= settings_.max_batch_spans;
      count = 0;
    }
  }
  if (full_batch) wake_.notify_one();
  if (count > 0) count_dropped(count, "the export queue is full");
}

void SpanExporter::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void SpanExporter::run() {
  using Clock = std::chrono::steady_clock;
  std::unique_lock lock(mutex_);
  std::optional<Clock::time_point> flush_deadline;
  while (true) {
    if (!stopping_) {
      wake_.wait_for(lock, settings_.export_interval,
                     [this] { return stopping_ || queue_.size() >= settings_.max_batch_spans; });
    }
    if (stopping_ && !flush_deadline) flush_deadline = Clock::now() + settings_.timeout;
    if (queue_.empty()) {
      if (stopping_) return;
      continue;
    }
    if (flush_deadline && Clock::now() >= *flush_deadline) {
      size_t left = queue_.size();
      queue_.clear();
      lock.unlock();
      count_dropped(left, "the server shut down before they could be sent");
      return;
    }
    size_t take = std::min(queue_.size(), settings_.max_batch_spans);
    std::vector<SpanRecord> batch(std::make_move_iterator(queue_.begin()),
                                  std::make_move_iterator(queue_.begin() + take));
    queue_.erase(queue_.begin(), queue_.begin() + take);
    lock.unlock();
    Clock::time_point deadline = Clock::now() + settings_.timeout;
    if (flush_deadline) deadline = std::min(deadline, *flush_deadline);
    export_batch(batch, deadline);
    lock.lock();
  }
}

void SpanExporter::export_batch(const std::vector<SpanRecord>& batch,
                                std::chrono::steady_clock::time_point deadline) {
  tools::HttpPost post;
  post.endpoint = &settings_.endpoint;
  post.body = encode_export_request(settings_.source, batch);
  post.headers = settings_.headers;
  post.headers.emplace_back("Content-Type", "application/x-protobuf");
  post.deadline = deadline;
  post.max_body_bytes = 64 << 10;
  post.tls = tls_ ? &*tls_ : nullptr;
  tools::HttpOutcome outcome = tools::post(post);
  if (outcome.kind == tools::HttpOutcome::Kind::response && outcome.status >= 200 &&
      outcome.status < 300) {
    exported_.fetch_add(batch.size(), std::memory_order_relaxed);
    return;
  }
  failed_exports_.fetch_add(1, std::memory_order_relaxed);
  std::string why =
      outcome.kind == tools::HttpOutcome::Kind::response
          ? "the collector at " + settings_.url + " answered " + std::to_string(outcome.status)
          : "the collector at " + settings_.url + " could not be reached (" + outcome.error + ")";
  count_dropped(batch.size(), why);
}

void SpanExporter::count_dropped(size_t spans, const std::string& why) {
  dropped_.fetch_add(spans, std::memory_order_relaxed);
  std::lock_guard lock(warning_mutex_);
  dropped_since_warning_ += spans;
  auto now = std::chrono::steady_clock::now();
  if (last_warning_ != std::chrono::steady_clock::time_point{} &&
      now - last_warning_ < kWarningInterval) {
    return;
  }
  spdlog::warn("tracing: dropped {} spans: {} (chatflow:trace_spans_dropped_total counts them all)",
               dropped_since_warning_, why);
  dropped_since_warning_ = 0;
  last_warning_ = now;
}

}  // namespace chatflow::tracing
