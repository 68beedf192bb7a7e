// Conversations for measuring what a semantic cache serves
// (tests/data/semantic_cache_followups.jsonl is one), and their scoring: how many true repeats it
// answered from the cache, and how many questions it gave an answer that was meant for another
// question.
//
// The file is JSON Lines: one conversation per line, blank lines and lines starting with '#'
// skipped.
//   {"id": "dragon", "system": "optional system prompt", "note": "optional, for readers",
//    "turns": [{"user": "Tell me a story about a dragon"},
//              {"user": "And then what?", "intent": "dragon-then"},
//              {"user": "Why was the dragon sad?", "expect": "miss"}]}
// The conversations are played in file order against one cache, one turn at a time, the answer
// (from the model or the cache) joining the conversation as the assistant's turn, as a client
// keeping its own history sends it. A turn with "assistant" is history the client sends as
// written: it is not asked. "intent" names what a question asks: two questions with the same
// intent asked after equivalent turns (the same intents and the same answers) may be given each
// other's answers. A question without an intent has one of its own. "expect": "hit" marks a true
// repeat (an earlier question has its intent; the cache should answer it), "expect": "miss" a
// question that must not be answered from the cache (it needs no intent: any cached answer is
// another question's).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "framework/api/request.h"

namespace chatflow::cache {

enum class Expectation { none, hit, miss };

struct DatasetTurn {
  std::string user;
  std::optional<std::string> assistant;  // history the client sends as written: not asked
  std::string intent;                    // empty: a question of its own
  Expectation expect = Expectation::none;
};

struct DatasetConversation {
  std::string id;
  std::string system;
  std::vector<DatasetTurn> turns;
  size_t line = 0;
};

// The conversations of `path`; throws std::runtime_error naming the file, line and problem.
std::vector<DatasetConversation> read_followup_dataset(const std::string& path);

struct ServedAnswer {
  std::string text;
  bool from_cache = false;
};

// Asks the cache under test the last message of `messages` (the conversation so far). Answers
// that do not come from the cache must differ from each other (a model that numbers its
// answers), so a cached answer tells which question it was first given to.
using AskCache = std::function<ServedAnswer(const std::vector<Message>& messages)>;

struct FollowupScore {
  size_t conversations = 0;
  size_t asked = 0;
  size_t repeats = 0;              // questions expected to hit
  size_t repeats_served = 0;       // ... answered from the cache with their own intent's answer
  size_t different = 0;            // questions expected to miss
  size_t different_served = 0;     // ... answered from the cache all the same (false hits)
  size_t wrong_answers = 0;        // any question given another question's answer
  std::vector<std::string> wrong;  // what was served wrongly, one line each
  std::vector<std::string> missed_repeats;  // true repeats the cache did not answer
};

// Plays `conversations` through `ask`; throws std::runtime_error when the model's own answers
// repeat (the score would be meaningless).
FollowupScore score_followups(const std::vector<DatasetConversation>& conversations,
                              const AskCache& ask);

}  // namespace chatflow::cache
