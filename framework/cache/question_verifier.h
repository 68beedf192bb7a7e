// Whether two questions that embed alike ask the same thing. An embedding says how much two texts
// share, not what they ask: "Why was the dragon sad?" and "And then what?" can sit close, and "Is
// the bridge safe?" is closer still to "Is the bridge not safe?". The semantic cache serves a
// neighbour only when this verifier finds no difference in intent between the two questions.
//
// Two questions are the same when, after case folding, contractions and plural or possessive
// endings, they have the same numbers in the same order, both or neither negated (not, never, no,
// n't, 不, 没...), the same question words (what, why, how, when, where, who, which), the same
// people and things pointed at (I, you, he, she, it, they, this, that), the same tense of their
// auxiliary (was, did against is, does), the same modal verbs (can, will, should, may), and the
// same content words in the same order: every word but articles, forms of be, do and have, "of",
// "and" and "please" (prepositions count: "books by Orwell" is not "books about Orwell"). Chinese
// text is compared as written, without its particles (的 了 吗 呢 吧 啊) and 是, 请, 请问. The
// bound is zero: any content word one question has and the other lacks makes them different,
// because one added word ("gluten-free bread", "the red dragon") is enough to change the answer.
#pragma once

#include <string>
#include <string_view>

namespace chatflow::cache {

// Empty when `a` and `b` ask the same thing; else what differs, for people ("different question
// words: why / what").
std::string question_difference(std::string_view a, std::string_view b);

inline bool same_question(std::string_view a, std::string_view b) {
  return question_difference(a, b).empty();
}

}  // namespace chatflow::cache
