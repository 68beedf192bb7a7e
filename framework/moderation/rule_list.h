// A moderation rule list: a file of phrases (one per line, any language, '#' starts a comment)
// or, for files named *.patterns, of RE2 patterns. Phrases are matched in normalised text
// (see normalizer.h) and tolerate up to three separator characters between their letters, so
// "k.i.l.l", "k i l l" and "KILL" all match "kill"; Latin phrases match whole words only, so
// "skill" does not. All rules of a list are tested together with one RE2::Set.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}  // namespace re2

namespace chatflow::moderation {

struct RuleMatch {
  size_t rule = 0;   // index into the list's rules
  size_t begin = 0;  // byte range in the normalised text
  size_t end = 0;
};

class RuleList {
 public:
  // Throws std::runtime_error naming file:line for an unreadable file or a bad pattern.
  static std::shared_ptr<const RuleList> load(const std::string& path);
  static std::shared_ptr<const RuleList> from_phrases(std::string name,
                                                      const std::vector<std::string>& phrases);
  static std::shared_ptr<const RuleList> from_patterns(std::string name,
                                                       const std::vector<std::string>& patterns);
  ~RuleList();

  const std::string& name() const { return name_; }
  const std::string& rule(size_t index) const { return sources_[index]; }
  size_t size() const { return sources_.size(); }

  // Whether any rule matches `normalized` (one pass of the set).
  bool matches(std::string_view normalized) const;
  // Every match of every rule, by position (overlaps included).
  std::vector<RuleMatch> find_all(std::string_view normalized) const;

 private:
  RuleList() = default;
  void add(const std::string& source, const std::string& pattern, bool whole,
           const std::string& where);
  void compile(const std::string& where);
  struct Projection;
  static Projection project(std::string_view normalized);
  std::vector<RuleMatch> find_all_in(std::string_view text) const;

  std::string name_;
  bool phrases_ = false;  // phrases match the projection (rule_list.cpp), patterns the text
  std::vector<std::string> sources_;
  std::vector<std::unique_ptr<re2::RE2>> rules_;
  struct Set;  // re2::RE2::Set, which cannot be declared here
  std::unique_ptr<Set> set_;
};

// The RE2 pattern a phrase becomes (exposed for tests).
std::string phrase_pattern(std::string_view phrase);

}  // namespace chatflow::moderation
