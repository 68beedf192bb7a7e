#include "framework/history/trim.h"

namespace chatflow::history {

TrimOutcome trim_to_budget(const std::vector<Message>& messages, int64_t budget,
                           const std::function<int64_t(const std::vector<Message>&)>& count,
                           const std::string& budget_reason) {
  std::vector<Message> system;
  std::vector<Message> rest;
  for (const auto& message : messages)
    (message.role == "system" ? system : rest).push_back(message);
  // The tail: the newest user message and whatever follows it.
  size_t tail_start = rest.size();
  for (size_t i = rest.size(); i > 0; --i) {
    if (rest[i - 1].role == "user") {
      tail_start = i - 1;
      break;
    }
  }
  if (tail_start == rest.size()) tail_start = rest.empty() ? 0 : rest.size() - 1;
  // Earlier messages as turns: a user message and the answers after it.
  std::vector<std::vector<Message>> turns;
  for (size_t i = 0; i < tail_start; ++i) {
    if (turns.empty() || rest[i].role == "user") turns.emplace_back();
    turns.back().push_back(rest[i]);
  }
  auto build = [&](size_t kept) {
    std::vector<Message> candidate = system;
    for (size_t t = turns.size() - kept; t < turns.size(); ++t)
      candidate.insert(candidate.end(), turns[t].begin(), turns[t].end());
    candidate.insert(candidate.end(), rest.begin() + static_cast<std::ptrdiff_t>(tail_start),
                     rest.end());
    return candidate;
  };
  int64_t minimum = count(build(0));
  if (minimum > budget) {
    throw RequestFailure(RequestError{
        400, "invalid_request_error",
        "the system prompt and the newest message alone need " + std::to_string(minimum) +
            " tokens; " +
            (budget_reason.empty() ? "the budget is " + std::to_string(budget) : budget_reason),
        "context_length_exceeded", "messages"});
  }
  // The count grows with every turn added: find the most that fit.
  size_t low = 0, high = turns.size();
  int64_t tokens = minimum;
  while (low < high) {
    size_t middle = (low + high + 1) / 2;
    int64_t needed = count(build(middle));
    if (needed <= budget) {
      low = middle;
      tokens = needed;
    } else {
      high = middle - 1;
    }
  }
  TrimOutcome outcome;
  outcome.messages = build(low);
  outcome.turns_kept = low;
  outcome.turns_dropped = turns.size() - low;
  outcome.tokens = tokens;
  return outcome;
}

}  // namespace chatflow::history
