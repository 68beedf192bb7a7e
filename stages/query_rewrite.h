// query_rewrite: see query_rewrite.cpp.
#pragma once

#include <string>
#include <vector>

#include "framework/api/request.h"

namespace chatflow {

// The side conversation the model is asked to rewrite with: `instructions` as the system
// prompt, then the earlier turns (each cut to `max_turn_chars`) and the newest question.
std::vector<Message> rewrite_messages(const std::vector<Message>& conversation,
                                      const std::string& instructions, size_t max_turn_chars);

}  // namespace chatflow
