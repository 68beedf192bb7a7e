#include "framework/moderation/pii.h"

#include <algorithm>

#include <re2/re2.h>

namespace chatflow::moderation {
namespace {

std::string digits_of(std::string_view text) {
  std::string digits;
  for (char c : text) {
    if (c >= '0' && c <= '9') digits += c;
  }
  return digits;
}

// Each pattern's group 1 is the candidate; the characters around it only keep numbers whole.
const re2::RE2& email_pattern() {
  static const re2::RE2 pattern(
      "([A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{2,})");
  return pattern;
}
const re2::RE2& cn_mobile_pattern() {
  static const re2::RE2 pattern(
      "(?:^|[^0-9+])((?:\\+?86[ -]?)?1[3-9][0-9](?:[ -]?[0-9]{4}){2})(?:$|[^0-9])");
  return pattern;
}
const re2::RE2& e164_pattern() {
  static const re2::RE2 pattern("(?:^|[^0-9+])(\\+[1-9](?:[ -]?[0-9]){7,14})(?:$|[^0-9])");
  return pattern;
}
const re2::RE2& card_pattern() {
  static const re2::RE2 pattern("(?:^|[^0-9])((?:[0-9][ -]?){12,18}[0-9])(?:$|[^0-9])");
  return pattern;
}
const re2::RE2& cn_id_pattern() {
  static const re2::RE2 pattern("(?:^|[^0-9])([1-9][0-9]{16}[0-9Xx])(?:$|[^0-9A-Za-z])");
  return pattern;
}

template <class Accept>
void scan(std::string_view text, const re2::RE2& pattern, PiiKind kind, Accept accept,
          std::vector<PiiMatch>& out) {
  re2::StringPiece input(text.data(), text.size());
  re2::StringPiece groups[2];
  size_t start = 0;
  while (start < text.size() &&
         pattern.Match(input, start, text.size(), re2::RE2::UNANCHORED, groups, 2)) {
    size_t begin = static_cast<size_t>(groups[1].data() - text.data());
    size_t end = begin + groups[1].size();
    if (accept(text.substr(begin, end - begin))) out.push_back({kind, begin, end});
    // The trailing boundary character may begin the next number.
    start = end;
  }
}

}  // namespace

std::string_view to_string(PiiKind kind) {
  switch (kind) {
    case PiiKind::phone:
      return "phone";
    case PiiKind::card:
      return "card";
    case PiiKind::email:
      return "email";
    case PiiKind::cn_id:
      return "cn_id";
  }
  return "pii";
}

bool luhn_valid(std::string_view number) {
  std::string digits = digits_of(number);
  if (digits.empty()) return false;
  int sum = 0;
  bool double_it = false;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    int d = *it - '0';
    if (double_it) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double_it = !double_it;
  }
  return sum % 10 == 0;
}

bool cn_id_valid(std::string_view id) {
  static constexpr int kWeights[17] = {7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2};
  static constexpr char kChecks[] = "10X98765432";
  if (id.size() != 18) return false;
  int sum = 0;
  for (int i = 0; i < 17; ++i) {
    if (id[static_cast<size_t>(i)] < '0' || id[static_cast<size_t>(i)] > '9') return false;
    sum += (id[static_cast<size_t>(i)] - '0') * kWeights[i];
  }
  char expected = kChecks[sum % 11];
  char last = id[17] == 'x' ? 'X' : id[17];
  if (last != expected) return false;
  // The birth date must be plausible: year 1900-2099, month 01-12, day 01-31.
  int year = std::stoi(std::string(id.substr(6, 4)));
  int month = std::stoi(std::string(id.substr(10, 2)));
  int day = std::stoi(std::string(id.substr(12, 2)));
  return year >= 1900 && year <= 2099 && month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

std::vector<PiiMatch> find_pii(std::string_view text, const PiiDetectors& detectors) {
  std::vector<PiiMatch> found;
  auto any = [](std::string_view) { return true; };
  if (detectors.email) scan(text, email_pattern(), PiiKind::email, any, found);
  if (detectors.cn_id) scan(text, cn_id_pattern(), PiiKind::cn_id, cn_id_valid, found);
  if (detectors.card) {
    scan(
        text, card_pattern(), PiiKind::card,
        [](std::string_view candidate) {
          size_t digits = digits_of(candidate).size();
          return digits >= 13 && digits <= 19 && luhn_valid(candidate);
        },
        found);
  }
  if (detectors.phone) {
    scan(text, cn_mobile_pattern(), PiiKind::phone, any, found);
    scan(
        text, e164_pattern(), PiiKind::phone,
        [](std::string_view candidate) {
          size_t digits = digits_of(candidate).size();
          return digits >= 8 && digits <= 15;
        },
        found);
  }
  // Keep the first of overlapping matches (the longer when they start together).
  std::sort(found.begin(), found.end(), [](const PiiMatch& a, const PiiMatch& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::vector<PiiMatch> kept;
  for (const auto& match : found) {
    if (!kept.empty() && match.begin < kept.back().end) {
      kept.back().end = std::max(kept.back().end, match.end);
      continue;
    }
    kept.push_back(match);
  }
  return kept;
}

}  // namespace chatflow::moderation
