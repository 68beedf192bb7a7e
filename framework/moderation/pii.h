// Personal data in generated text: phone numbers (Chinese mobile numbers and international E.164
// numbers), bank card numbers (13 to 19 digits, spaces or dashes allowed, Luhn-valid only),
// e-mail addresses, and Chinese resident identity numbers (with their check character).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chatflow::moderation {

enum class PiiKind { phone, card, email, cn_id };

std::string_view to_string(PiiKind kind);

struct PiiMatch {
  PiiKind kind;
  size_t begin;  // byte range in the text searched
  size_t end;
};

struct PiiDetectors {
  bool phone = true;
  bool card = true;
  bool email = true;
  bool cn_id = true;
};

// Every match, by position; where two overlap, the earlier (or longer) one.
std::vector<PiiMatch> find_pii(std::string_view text, const PiiDetectors& detectors);

// The Luhn checksum over the digits of `number` (other characters ignored).
bool luhn_valid(std::string_view number);
// An 18-character Chinese resident identity number whose last character is its checksum.
bool cn_id_valid(std::string_view id);

}  // namespace chatflow::moderation
