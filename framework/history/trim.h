// The model's input under a token budget: system messages first, always; the newest user message
// (and anything after it) last, always; earlier turns added newest first while they fit, each
// turn (a user message with its answers) kept or dropped whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/api/request.h"

namespace chatflow::history {

struct TrimOutcome {
  std::vector<Message> messages;
  size_t turns_kept = 0;
  size_t turns_dropped = 0;
  int64_t tokens = 0;
};

// `count` gives the tokens of a whole message list as the model sees it (template included).
// Throws RequestFailure (400, context_length_exceeded) when the system messages and the newest
// user message alone do not fit; its message ends with `budget_reason` (what set the budget),
// "the budget is N" when empty.
TrimOutcome trim_to_budget(const std::vector<Message>& messages, int64_t budget,
                           const std::function<int64_t(const std::vector<Message>&)>& count,
                           const std::string& budget_reason = {});

}  // namespace chatflow::history
