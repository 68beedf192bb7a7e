#include "framework/cache/cached_answer.h"

#include "framework/api/response_recorder.h"

namespace chatflow::cache {

std::string scope_key(const Identity& identity, CacheScope scope) {
  if (scope == CacheScope::tenant || identity.user.empty()) return {};
  return "user:" + identity.user;
}

size_t CachedAnswer::bytes() const {
  size_t total = sizeof(CachedAnswer) + tenant.size() + model.size() + conversation.size();
  for (const auto& chunk : chunks) {
    total += sizeof(Chunk) + chunk.text.size() + chunk.reasoning.size();
    for (const auto& call : chunk.tool_calls)
      total += sizeof(ToolCall) + call.id.size() + call.name.size() + call.arguments.size();
  }
  for (const auto& citation : citations)
    total += sizeof(ContextPassage) + citation.text.size() + citation.document.size() +
             citation.title.size();
  return total;
}

std::shared_ptr<CachedAnswer> cacheable_answer(const Request& done, const RecordedAnswer& answer,
                                               std::chrono::steady_clock::duration ttl) {
  if (answer.failed || !answer.finish) return nullptr;
  if (*answer.finish == FinishReason::content_filter) return nullptr;
  if (done.annotation("output_moderation")) return nullptr;
  const GenerationParams& generation = done.generation;
  if (*answer.finish == FinishReason::length && generation.max_tokens == 0 &&
      generation.answer_token_cap > 0)
    return nullptr;
  auto cached = std::make_shared<CachedAnswer>();
  cached->chunks = answer.chunks;
  cached->finish = *answer.finish;
  cached->usage = answer.usage;
  cached->citations = done.citations;
  cached->tool_format = done.tool_format;
  cached->tenant = done.identity.tenant;
  cached->model = done.model;
  cached->expires = std::chrono::steady_clock::now() + ttl;
  return cached;
}

bool within_answer_cap(const CachedAnswer& answer, const GenerationParams& generation) {
  return generation.answer_token_cap <= 0 ||
         answer.usage.completion_tokens <= generation.answer_token_cap;
}

}  // namespace chatflow::cache
