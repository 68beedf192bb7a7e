#include "support/mixed_script_text.h"

#include <string_view>
#include <vector>

namespace chatflow::testing {
namespace {

// A small linear congruential generator: the same numbers on every platform.
class Numbers {
 public:
  explicit Numbers(uint64_t seed)
      : state_(seed * 6364136223846793005ULL + 1442695040888963407ULL) {}
  size_t below(size_t bound) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>((state_ >> 33) % bound);
  }
  template <class List>
  std::string_view pick(const List& list) {
    return list[below(std::size(list))];
  }

 private:
  uint64_t state_;
};

const std::string_view kLatin[] = {
    "Hello",   "world",    "tokenizer", "don't",  "I'm",      "you're", "we've",
    "they'll", "she'd",    "IT'S",      "HE'LL",  "O'Neil",   "café",   "naïve",
    "Straße",  "Ångström", "œuvre",     "façade", "jalapeño", "ǅemal",  "İstanbul",
    "ﬁne",     "Ｆｕｌｌ", "ａｂｃ",    "Ⅻ",      "ᵃᵇ",       "𝐁𝐨𝐥𝐝",   "𝔉𝔯𝔞𝔨",
    "Ωmega",   "Kelvin",   "the",       "of",     "and",      "a",      "to",
    "in",      "is",       "The",       "quick",  "brown",    "fox",    "jumps"};
const std::string_view kCjk[] = {"日本語",
                                 "中文字符",
                                 "漢字",
                                 "ひらがな",
                                 "カタカナ",
                                 "한국어",
                                 "조선말",
                                 "你好，世界。",
                                 "東京都",
                                 "ｶﾀｶﾅ",
                                 "〇一二三",
                                 "龥龦",
                                 "㐀㐁",
                                 "𠀀𠀁",
                                 "テスト",
                                 "ー",
                                 "\xF0\xAE\xAF\xB0\xF0\xAE\xAF\xB1",
                                 "\xE2\xBF\xBC"};
const std::string_view kArabic[] = {"مرحبا", "بالعالم", "العربية", "٠١٢٣٤٥٦٧٨٩", "كتاب؟",
                                    "سلام،", "ﻻ",       "פשוט",    "עברית"};
const std::string_view kDevanagari[] = {"नमस्ते", "हिन्दी", "संस्कृतम्", "क्षत्रिय", "१२३४",
                                        "।",    "॥",     "ঢাকা",  "தமிழ்",   "ไทย"};
const std::string_view kEmoji[] = {"🎉",
                                   "😀",
                                   "🦙",
                                   "👍🏽",
                                   "👨‍👩‍👧‍👦",
                                   "🏳️‍🌈",
                                   "🇺🇸",
                                   "🇯🇵",
                                   "1️⃣",
                                   "#️⃣",
                                   "❤️",
                                   "☕",
                                   "✨",
                                   "🧑🏿‍💻",
                                   "👩‍❤️‍💋‍👨",
                                   "🫠",
                                   "©",
                                   "™",
                                   "⌘",
                                   "∑",
                                   "≈",
                                   "√",
                                   "€",
                                   "£",
                                   "¥",
                                   "₿"};
const std::string_view kCode[] = {
    "int main() { return 0; }",
    "for (size_t i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "def f(x):\n    return x ** 2  # square\n",
    "if (a && b || !c) { x <<= 2; y >>= 3; }",
    "const re = /^[a-z]+$/i; // regex",
    "std::vector<std::string> v{\"a\", \"b\"};",
    "$HOME/~user/.config | grep -E '^x' > out.txt",
    "x = {'key': [1, 2.5, -3e10], \"k2\": None}",
    "<html><body class=\"x\">&amp;&lt;</body></html>",
    "SELECT * FROM t WHERE id = 42;",
    "a_b-c.d:e;f,g!h?i@j#k%l^m&n*o(p)q[r]s{t}u`v~w\\x",
    "   indented\n\t\ttabbed\r\n",
    "0x1F 0b1010 1_000_000 3.14159 -0.5e-3",
};
const std::string_view kSpaces[] = {
    " ",        "  ",   "   ",  "    ",  "        ", "\t",           "\t\t",         "\n",
    "\n\n",     "\r\n", " \n ", "\n \n", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83", "\xE2\x80\xA8",
    "\xC2\x85", "\x0B", "\x0C", " \t \n"};
const std::string_view kCombining[] = {
    "e\xCC\x81", "a\xCC\x88\xCC\xA3",       "n\xCC\x83", "Z\xCD\x91\xCD\x8B\xCD\x92", "o\xCC\xB8",
    "\xCC\x81",  "\xE0\xA4\x95\xE0\xA5\x8D"};
const std::string_view kRare[] = {
    "\xEF\xBB\xBF",     "\xE2\x80\x8B",     "\xE2\x80\x8D", "\xEE\x80\x80", "\xEF\xBF\xBD",
    "\xF0\x90\x8C\x80", "\xF4\x8F\xBF\xBD", "\xEF\xBF\xBE", "\x01",         "\x7F",
    "\xC2\x9F",         "\xE2\x81\xA6"};
const std::string_view kInvalid[] = {"\x80",         "\xBF\xBF",     "\xC3",  "\xE2\x82",
                                     "\xF0\x9F\x98", "\xFF",         "\xFE",  "\xC0\xAF",
                                     "\xE0\x80\xAF", "\xF8\x88\x80", "\xC3(", "a\x80z"};
const std::string_view kSpecial[] = {"<s>",   "</s>",  "<unk>", "<|endoftext|>",
                                     "[CLS]", "[SEP]", "<pad>", "<|im_start|>"};

std::string digits(Numbers& numbers) {
  std::string run;
  size_t length = 1 + numbers.below(14);
  for (size_t i = 0; i < length; ++i)
    run += static_cast<char>('0' + numbers.below(10));
  return run;
}

}  // namespace

std::string mixed_script_text(size_t bytes, uint64_t seed) {
  Numbers numbers(seed);
  std::string text;
  text.reserve(bytes + 256);
  while (text.size() < bytes) {
    size_t kind = numbers.below(100);
    if (kind < 30) {
      text += numbers.pick(kLatin);
    } else if (kind < 38) {
      text += numbers.pick(kCjk);
    } else if (kind < 44) {
      text += numbers.pick(kArabic);
    } else if (kind < 50) {
      text += numbers.pick(kDevanagari);
    } else if (kind < 56) {
      text += numbers.pick(kEmoji);
    } else if (kind < 62) {
      text += numbers.pick(kCode);
    } else if (kind < 68) {
      text += digits(numbers);
    } else if (kind < 72) {
      text += numbers.pick(kCombining);
    } else if (kind < 75) {
      text += numbers.pick(kRare);
    } else if (kind < 77) {
      text += numbers.pick(kInvalid);
    } else if (kind < 78) {
      text += numbers.pick(kSpecial);
    } else if (kind < 84) {
      text += numbers.pick(kSpaces);
      continue;
    } else {
      text += ".,!?;:'\"-()"[numbers.below(11)];
    }
    // Mostly a single space between pieces, sometimes none.
    if (numbers.below(5) != 0) text += ' ';
  }
  return text;
}

}  // namespace chatflow::testing
