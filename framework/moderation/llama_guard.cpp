#include "framework/moderation/llama_guard.h"

#include <cctype>
#include <stdexcept>

namespace chatflow::moderation {

const std::vector<std::string>& llama_guard_categories() {
  static const std::vector<std::string> categories = {"S1: Violent Crimes.",
                                                      "S2: Non-Violent Crimes.",
                                                      "S3: Sex-Related Crimes.",
                                                      "S4: Child Sexual Exploitation.",
                                                      "S5: Defamation.",
                                                      "S6: Specialized Advice.",
                                                      "S7: Privacy.",
                                                      "S8: Intellectual Property.",
                                                      "S9: Indiscriminate Weapons.",
                                                      "S10: Hate.",
                                                      "S11: Suicide & Self-Harm.",
                                                      "S12: Sexual Content.",
                                                      "S13: Elections.",
                                                      "S14: Code Interpreter Abuse."};
  return categories;
}

std::string llama_guard_task(const std::vector<std::string>& categories, std::string_view user,
                             std::string_view agent, Speaker judged) {
  std::string role = judged == Speaker::user ? "User" : "Agent";
  std::string task = "Task: Check if there is unsafe content in '" + role +
                     "' messages in conversations according our safety policy with the below "
                     "categories.\n\n<BEGIN UNSAFE CONTENT CATEGORIES>\n";
  for (const auto& category : categories)
    task += category + "\n";
  task += "<END UNSAFE CONTENT CATEGORIES>\n\n<BEGIN CONVERSATION>\n\n";
  task += "User: " + std::string(user) + "\n\n";
  if (judged == Speaker::assistant) task += "Agent: " + std::string(agent) + "\n\n";
  task += "<END CONVERSATION>\n\nProvide your safety assessment for ONLY THE LAST " + role +
          " message in the above conversation:\n - First line must read 'safe' or 'unsafe'.\n"
          " - If unsafe, a second line must include a comma-separated list of violated "
          "categories.";
  return task;
}

namespace {

std::string_view trim(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size() && std::isspace(static_cast<unsigned char>(text[begin])))
    ++begin;
  size_t end = text.size();
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1])))
    --end;
  return text.substr(begin, end - begin);
}

// The next line of `text` from `position` (which moves past it), trimmed.
std::string_view next_line(std::string_view text, size_t& position) {
  size_t end = text.find('\n', position);
  if (end == std::string_view::npos) end = text.size();
  std::string_view line = trim(text.substr(position, end - position));
  position = end < text.size() ? end + 1 : text.size();
  return line;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_category_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != ' ' && c != '_' && c != '-')
      return false;
  }
  return true;
}

std::string quoted_excerpt(std::string_view answer) {
  std::string excerpt(answer.substr(0, 80));
  for (char& c : excerpt) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return "'" + excerpt + (answer.size() > 80 ? "...'" : "'");
}

}  // namespace

std::optional<Verdict> parse_llama_guard_answer(std::string_view answer, std::string& error) {
  size_t position = 0;
  std::string_view first;
  while (position < answer.size() && first.empty())
    first = next_line(answer, position);
  std::string word = lower(first);
  if (!word.empty() && word.back() == '.') word.pop_back();
  if (word == "safe") return Verdict{};
  if (word != "unsafe") {
    error = "the classifier's answer is neither 'safe' nor 'unsafe': " + quoted_excerpt(answer);
    return std::nullopt;
  }
  Verdict verdict;
  verdict.flagged = true;
  std::string_view categories = position < answer.size() ? next_line(answer, position) : "";
  while (!categories.empty()) {
    size_t comma = categories.find(',');
    std::string_view name = trim(categories.substr(0, comma));
    categories = comma == std::string_view::npos ? "" : categories.substr(comma + 1);
    if (name.empty()) continue;
    if (!is_category_name(name)) {
      error =
          "the classifier's categories are not a comma-separated list: " + quoted_excerpt(answer);
      return std::nullopt;
    }
    verdict.categories.emplace_back(name);
  }
  return verdict;
}

CheckOutcome ClassifierProvider::check(const CheckInput& input) const {
  std::string task =
      input.speaker == Speaker::user
          ? llama_guard_task(categories_, input.text, {}, Speaker::user)
          : llama_guard_task(categories_, input.question, input.text, Speaker::assistant);
  std::string answer;
  try {
    answer = generate_(task, input);
  } catch (const std::exception& failure) {
    if (CheckClock::now() >= input.deadline)
      return CheckOutcome::timeout(model_name_ + ": no answer within the timeout");
    return CheckOutcome::failure(model_name_ + ": " + failure.what());
  }
  std::string error;
  std::optional<Verdict> verdict = parse_llama_guard_answer(answer, error);
  if (!verdict) return CheckOutcome::failure(model_name_ + ": " + error);
  return CheckOutcome::of(std::move(*verdict));
}

}  // namespace chatflow::moderation
