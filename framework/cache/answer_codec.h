// A cached answer as JSON, for caches kept outside the process (Redis): every field a hit
// replays. Decoding checks the shape and throws std::runtime_error on anything else, so a
// damaged or foreign value is a miss, never a wrong answer.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "framework/cache/cached_answer.h"

namespace chatflow::cache {

std::string encode_answer(const CachedAnswer& answer);
// `expires` is where this process's clock says the entry ends.
std::shared_ptr<CachedAnswer> decode_answer(std::string_view json,
                                            std::chrono::steady_clock::time_point expires);

}  // namespace chatflow::cache
