// A cached answer as JSON, for caches kept outside the process (Redis): every field a hit
// replays. Decoding checks the shape and throws std::runtime_error on anything else, so a
// damaged or foreign value is a miss, never a wrong answer. Each value says its layout
// ("format"); a value of another layout (one written by an older chatflow) is such a miss too.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "framework/cache/cached_answer.h"

namespace chatflow::cache {

// The layout encode_answer writes. 2: chunks are objects with text, reasoning and tool calls
// (1, unmarked, held text only, a reasoning model's thinking inside it).
inline constexpr int64_t kAnswerFormat = 2;

std::string encode_answer(const CachedAnswer& answer);
// `expires` is where this process's clock says the entry ends.
std::shared_ptr<CachedAnswer> decode_answer(std::string_view json,
                                            std::chrono::steady_clock::time_point expires);

}  // namespace chatflow::cache
