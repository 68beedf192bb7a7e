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

}  // namespace chatflow::retrieval
