// An answer kept by a cache: the deltas as the client first received them, each with its text,
// reasoning and tool calls (so a hit streams back in the same shape), how it ended, its token
// counts and the documents it cited.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/api/chunk.h"
#include "framework/api/request.h"

namespace chatflow {
struct RecordedAnswer;
}

namespace chatflow::cache {

struct CachedAnswer {
  std::vector<Chunk> chunks;  // text, reasoning and tool calls only
  FinishReason finish = FinishReason::stop;
  Usage usage;
  std::string tenant;
  std::string model;
  std::string conversation;  // the conversation's digest without parameters, for corrections
  std::vector<ContextPassage> citations;  // what the answer cited, returned with it on a hit
  ToolCallFormat tool_format = ToolCallFormat::none;  // how its tool calls are written
  std::chrono::steady_clock::time_point expires;

  size_t bytes() const;
};

// Who shares a cached answer: everyone of the tenant, or (`user`) only the same user of it. With
// `user` a caller without a user (a key issued to no one) shares its tenant's answers.
enum class CacheScope { tenant, user };

// The part of a cache key that says who may get the answer back: empty for `tenant` or a caller
// without a user, else the user.
std::string scope_key(const Identity& identity, CacheScope scope);

// What a cache keeps of an answer the client received, expiring after `ttl`; null when it must
// not be kept: it failed or was cut short, a filter ended it, output moderation changed it
// (masked text is not what the model said, so it is never served again), or it ended at the cap
// a gate set on an answer without max_tokens (where it ends depends on what the caller's limits
// held at the time, not on the request).
std::shared_ptr<CachedAnswer> cacheable_answer(const Request& done, const RecordedAnswer& answer,
                                               std::chrono::steady_clock::duration ttl);

// Whether `answer` may be served to a request with `generation`: not when it is longer than the
// cap a gate set (GenerationParams::answer_token_cap), which is all the gates hold for it.
bool within_answer_cap(const CachedAnswer& answer, const GenerationParams& generation);

}  // namespace chatflow::cache
