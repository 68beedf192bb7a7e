#include "framework/api/response_recorder.h"

namespace chatflow {

std::string RecordedAnswer::text() const {
  std::string joined;
  for (const auto& chunk : chunks)
    joined += chunk.text;
  return joined;
}

std::string RecordedAnswer::reasoning() const {
  std::string joined;
  for (const auto& chunk : chunks)
    joined += chunk.reasoning;
  return joined;
}

RecordingSink::RecordingSink(std::shared_ptr<Sink> inner,
                             std::function<void(const Request&, const RecordedAnswer&)> before_last,
                             std::function<void(const Request&, const RecordedAnswer&)> after)
    : inner_(std::move(inner)), before_last_(std::move(before_last)), after_(std::move(after)) {}

void RecordingSink::on_chunk(Request& request, const Chunk& chunk) {
  if (!chunk.text.empty() || !chunk.reasoning.empty() || !chunk.tool_calls.empty()) {
    Chunk kept;
    kept.text = chunk.text;
    kept.reasoning = chunk.reasoning;
    kept.tool_calls = chunk.tool_calls;
    answer_.chunks.push_back(std::move(kept));
  }
  if (chunk.is_final()) {
    answer_.finish = chunk.finish;
    if (chunk.usage) answer_.usage = *chunk.usage;
    if (before_last_) before_last_(request, answer_);
  }
  if (inner_) inner_->on_chunk(request, chunk);
}

void RecordingSink::on_finish(Request& request) {
  answer_.failed = request.error().has_value();
  if (!answer_.finish && request.finish_reason()) answer_.finish = request.finish_reason();
  if (inner_) inner_->on_finish(request);
  if (after_) after_(request, answer_);
}

void RecordingSink::on_released(const Request& request) {
  if (inner_) inner_->on_released(request);
}

void record_answer(Request& request,
                   std::function<void(const Request&, const RecordedAnswer&)> before_last,
                   std::function<void(const Request&, const RecordedAnswer&)> after) {
  request.sink = std::make_shared<RecordingSink>(std::move(request.sink), std::move(before_last),
                                                 std::move(after));
}

}  // namespace chatflow
