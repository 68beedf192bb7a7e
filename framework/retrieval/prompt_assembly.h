// The reference block retrieved passages go into: numbered for citation, fenced by markers the
// passages themselves cannot forge, and labelled as quoted data whose instructions are never
// followed (indirect prompt injection).
#pragma once

#include <string>
#include <vector>

namespace chatflow::retrieval {

struct Reference {
  std::string document;
  std::string title;
  std::string text;
};

extern const char* const kReferenceBegin;
extern const char* const kReferenceEnd;

// `instructions`, then the passages as [1], [2]..., each cut to `max_chars` (on a UTF-8
// boundary), inside kReferenceBegin/kReferenceEnd. Marker look-alikes inside a passage are
// defused, so no passage can end the block early.
std::string reference_block(const std::string& instructions, const std::vector<Reference>& passages,
                            size_t max_chars);

extern const char* const kToolResultBegin;
extern const char* const kToolResultEnd;

// A tool's result as the content of its tool message: fenced and labelled as data in the same
// way, cut to `max_chars`, so a result cannot close the fence or pass for instructions.
std::string tool_result_block(const std::string& tool, const std::string& result, size_t max_chars);

}  // namespace chatflow::retrieval
