// The English stop words of retrieval: dropped from BM25 queries and ignored by the lexical
// reranker, so both sides agree on which words of a question count.
#pragma once

#include <set>
#include <string>

namespace chatflow::retrieval {

inline const std::set<std::string>& stopwords() {
  static const std::set<std::string> words = {
      "a",    "about", "above", "after", "again",  "all",   "also",  "am",    "an",    "and",
      "any",  "are",   "as",    "at",    "be",     "been",  "being", "both",  "but",   "by",
      "can",  "could", "did",   "do",    "does",   "doing", "done",  "each",  "few",   "for",
      "from", "had",   "has",   "have",  "having", "he",    "her",   "here",  "him",   "his",
      "how",  "i",     "if",    "in",    "into",   "is",    "it",    "its",   "me",    "more",
      "most", "my",    "of",    "on",    "once",   "only",  "or",    "other", "our",   "out",
      "over", "own",   "same",  "she",   "should", "so",    "some",  "such",  "than",  "that",
      "the",  "their", "them",  "then",  "there",  "these", "they",  "this",  "those", "through",
      "to",   "too",   "under", "until", "up",     "very",  "was",   "we",    "were",  "what",
      "when", "where", "which", "while", "who",    "whom",  "why",   "will",  "with",  "would",
      "you",  "your"};
  return words;
}

}  // namespace chatflow::retrieval
