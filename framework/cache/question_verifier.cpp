#include "framework/cache/question_verifier.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "framework/text/bert_words.h"
#include "framework/text/normalizer.h"
#include "framework/text/utf8.h"

namespace chatflow::cache {
namespace {

// What a question asks, as the verifier compares it.
struct Signature {
  std::vector<std::string> numbers;  // in order: "15% of 80" is not "80% of 15"
  bool negated = false;
  std::set<std::string> question_words;
  std::set<std::string> references;  // who or what is pointed at: i, we, you, he, she, it...
  std::set<std::string> modals;      // can, will, should, may
  bool past = false;                 // an auxiliary in the past: was, were, did, had
  std::vector<std::string> content;  // content words in order; Chinese runs without particles
};

// How a word that is not a content word counts.
enum class Role { negation, question, reference, modal, past, function };

struct WordRole {
  Role role;
  const char* value;  // the question word, reference or modal it stands for
};

const std::map<std::string, WordRole, std::less<>>& word_roles() {
  static const std::map<std::string, WordRole, std::less<>> roles = [] {
    std::map<std::string, WordRole, std::less<>> table;
    auto add = [&](Role role, const char* value, std::initializer_list<const char*> words) {
      for (const char* word : words)
        table.emplace(word, WordRole{role, value});
    };
    add(Role::negation, "",
        {"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without", "cannot",
         "cant", "dont", "doesnt", "isnt", "arent", "wasnt", "werent", "wont", "didnt"});
    add(Role::question, "what", {"what"});
    add(Role::question, "why", {"why"});
    add(Role::question, "how", {"how"});
    add(Role::question, "when", {"when"});
    add(Role::question, "where", {"where"});
    add(Role::question, "who", {"who", "whom"});
    add(Role::question, "whose", {"whose"});
    add(Role::question, "which", {"which"});
    add(Role::reference, "i", {"i", "me", "my", "mine", "myself"});
    add(Role::reference, "we", {"we", "us", "our", "ours", "ourselves"});
    add(Role::reference, "you", {"you", "your", "yours", "yourself", "yourselves", "u"});
    add(Role::reference, "he", {"he", "him", "his", "himself"});
    add(Role::reference, "she", {"she", "her", "hers", "herself"});
    add(Role::reference, "it", {"it", "its", "itself"});
    add(Role::reference, "they", {"they", "them", "their", "theirs", "themselves"});
    add(Role::reference, "this", {"this", "these"});
    add(Role::reference, "that", {"that", "those"});
    add(Role::modal, "can", {"can", "could"});
    add(Role::modal, "will", {"will", "would", "shall"});
    add(Role::modal, "should", {"should", "must", "ought"});
    add(Role::modal, "may", {"may", "might"});
    add(Role::past, "", {"was", "were", "did", "had"});
    // Words that carry no intent of their own: articles, be/do/have, "of", "and", politeness.
    // Every other preposition stays a content word: "books by Orwell" is not "books about
    // Orwell", nor "flights to Paris" "flights from Paris".
    add(Role::function, "",
        {"a", "an", "the", "is", "are", "am", "be", "been", "being", "do", "does", "has", "have",
         "having", "of", "and", "please", "kindly", "there"});
    return table;
  }();
  return roles;
}

// The contractions' other halves: "can't" is "ca" + "n't".
std::string contraction_base(const std::string& base) {
  if (base == "ca") return "can";
  if (base == "wo") return "will";
  if (base == "sha") return "shall";
  if (base == "ai") return "is";
  return base;
}

bool ends_with(const std::string& word, std::string_view suffix) {
  return word.size() >= suffix.size() &&
         word.compare(word.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Plural endings off, so "passwords" and "password" are one word.
std::string stem(const std::string& word) {
  if (word.size() > 4 && ends_with(word, "ies")) return word.substr(0, word.size() - 3) + "y";
  for (std::string_view suffix : {"ches", "shes", "sses", "xes", "zes"}) {
    if (word.size() > suffix.size() + 1 && ends_with(word, suffix))
      return word.substr(0, word.size() - 2);
  }
  if (word.size() > 3 && word.back() == 's' && !ends_with(word, "ss") && !ends_with(word, "us") &&
      !ends_with(word, "is"))
    return word.substr(0, word.size() - 1);
  return word;
}

void add_word(Signature& signature, std::string word) {
  // Contractions and possessives: "don't" is negated "do", "what's" is "what", "router's" is
  // "router", "you'll" is "you" and "will".
  if (word.size() > 3 && ends_with(word, "n't")) {
    signature.negated = true;
    word = contraction_base(word.substr(0, word.size() - 3));
  } else if (ends_with(word, "'ll") || ends_with(word, "'d")) {
    signature.modals.insert("will");
    word = word.substr(0, word.rfind('\''));
  } else if (ends_with(word, "'s") || ends_with(word, "'re") || ends_with(word, "'ve") ||
             ends_with(word, "'m")) {
    word = word.substr(0, word.rfind('\''));
  }
  while (!word.empty() && word.back() == '\'')
    word.pop_back();
  while (!word.empty() && word.front() == '\'')
    word.erase(0, 1);
  if (word.empty()) return;
  auto role = word_roles().find(word);
  if (role == word_roles().end()) {
    signature.content.push_back(stem(word));
    return;
  }
  switch (role->second.role) {
    case Role::negation:
      signature.negated = true;
      if (word == "cannot" || word == "cant") signature.modals.insert("can");
      if (word == "wont") signature.modals.insert("will");
      if (word == "didnt" || word == "wasnt" || word == "werent") signature.past = true;
      break;
    case Role::question:
      signature.question_words.insert(role->second.value);
      break;
    case Role::reference:
      signature.references.insert(role->second.value);
      break;
    case Role::modal:
      signature.modals.insert(role->second.value);
      break;
    case Role::past:
      signature.past = true;
      break;
    case Role::function:
      break;
  }
}

// A run of Chinese characters without its particles and politeness, as one content word.
void add_chinese(Signature& signature, std::u32string run) {
  static const char32_t kNegations[] = {U'不', U'没', U'無', U'无', U'非',
                                        U'别', U'未', U'否', U'勿'};
  for (char32_t c : kNegations)
    signature.negated |= run.find(c) != std::u32string::npos;
  for (std::u32string_view phrase : {U"请问", U"一下", U"麻烦"}) {
    for (size_t at = run.find(phrase); at != std::u32string::npos; at = run.find(phrase))
      run.erase(at, phrase.size());
  }
  std::u32string kept;
  for (char32_t c : run) {
    if (std::u32string_view(U"的了吗呢吧啊呀哦嘛呗啦是请").find(c) == std::u32string_view::npos)
      kept += c;
  }
  if (!kept.empty()) signature.content.push_back(text::to_utf8(kept));
}

bool is_digit(char32_t c) {
  return c >= U'0' && c <= U'9';
}

bool is_letter(char32_t c) {
  if ((c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z')) return true;
  return c >= 0x80 && !text::is_cjk_ideograph(c) && !text::is_bert_punctuation(c) && c != 0x3000 &&
         c != 0xA0 && !(c >= 0x2000 && c <= 0x200B);
}

Signature signature_of(std::string_view question) {
  // Curly apostrophes are apostrophes: "don’t" is "don't".
  std::string straight(question);
  for (std::string_view curly : {"\u2019", "\u2018", "\uff07"}) {
    for (size_t at = straight.find(curly); at != std::string::npos; at = straight.find(curly))
      straight.replace(at, curly.size(), "'");
  }
  std::u32string text = text::to_code_points(text::normalize(straight).text);
  Signature signature;
  for (size_t i = 0; i < text.size();) {
    char32_t c = text[i];
    size_t j = i + 1;
    if (is_digit(c)) {
      // A number as written, a decimal point inside it and a percent sign after it included.
      while (j < text.size() && (is_digit(text[j]) ||
                                 (text[j] == U'.' && j + 1 < text.size() && is_digit(text[j + 1]))))
        ++j;
      if (j < text.size() && text[j] == U'%') ++j;
      signature.numbers.push_back(text::to_utf8(text.substr(i, j - i)));
    } else if (text::is_cjk_ideograph(c)) {
      while (j < text.size() && text::is_cjk_ideograph(text[j]))
        ++j;
      add_chinese(signature, text.substr(i, j - i));
    } else if (is_letter(c) || c == U'\'') {
      while (j < text.size() && (is_letter(text[j]) || text[j] == U'\''))
        ++j;
      add_word(signature, text::to_utf8(text.substr(i, j - i)));
    }
    i = j;
  }
  return signature;
}

template <typename Words>
std::string joined(const Words& words) {
  std::string text;
  for (const auto& word : words)
    text += (text.empty() ? "" : " ") + word;
  return text.empty() ? "(none)" : text;
}

}  // namespace

std::string question_difference(std::string_view a, std::string_view b) {
  Signature x = signature_of(a), y = signature_of(b);
  if (x.numbers != y.numbers)
    return "different numbers: " + joined(x.numbers) + " / " + joined(y.numbers);
  if (x.negated != y.negated) return "only one is negated";
  if (x.question_words != y.question_words)
    return "different question words: " + joined(x.question_words) + " / " +
           joined(y.question_words);
  if (x.references != y.references)
    return "different people or things referred to: " + joined(x.references) + " / " +
           joined(y.references);
  if (x.past != y.past) return "different tenses";
  if (x.modals != y.modals)
    return "different modal verbs: " + joined(x.modals) + " / " + joined(y.modals);
  if (x.content != y.content)
    return "different content words: " + joined(x.content) + " / " + joined(y.content);
  return {};
}

}  // namespace chatflow::cache
