#include "framework/cache/followup_dataset.h"

#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include <boost/json.hpp>

namespace chatflow::cache {
namespace json = boost::json;
namespace {

class DatasetError : public std::runtime_error {
 public:
  DatasetError(const std::string& path, size_t line, const std::string& what)
      : std::runtime_error(path + ":" + std::to_string(line) + ": error: " + what) {}
};

std::string string_field(const json::object& object, const char* key, bool required,
                         const std::function<void(const std::string&)>& fail) {
  const json::value* value = object.if_contains(key);
  if (!value) {
    if (required) fail(std::string("missing \"") + key + "\"");
    return {};
  }
  if (!value->is_string()) fail(std::string("\"") + key + "\" must be a string");
  return std::string(value->as_string());
}

void check_keys(const json::object& object, std::initializer_list<const char*> known,
                const std::function<void(const std::string&)>& fail) {
  for (const auto& field : object) {
    bool found = false;
    for (const char* key : known)
      found |= field.key() == key;
    if (!found) fail("unknown key \"" + std::string(field.key()) + "\"");
  }
}

DatasetTurn turn_of(const json::value& value, const std::function<void(const std::string&)>& fail) {
  if (!value.is_object()) fail("a turn must be an object");
  const json::object& object = value.as_object();
  check_keys(object, {"user", "assistant", "intent", "expect"}, fail);
  DatasetTurn turn;
  turn.user = string_field(object, "user", true, fail);
  if (object.contains("assistant")) turn.assistant = string_field(object, "assistant", true, fail);
  turn.intent = string_field(object, "intent", false, fail);
  std::string expect = string_field(object, "expect", false, fail);
  if (expect == "hit") {
    turn.expect = Expectation::hit;
  } else if (expect == "miss") {
    turn.expect = Expectation::miss;
  } else if (!expect.empty()) {
    fail("\"expect\" must be \"hit\" or \"miss\", not \"" + expect + "\"");
  }
  if (turn.expect != Expectation::none && turn.assistant)
    fail("a turn with \"assistant\" is not asked: it cannot expect anything");
  if (turn.expect == Expectation::hit && turn.intent.empty())
    fail("a turn expected to hit names the intent it repeats");
  if (turn.expect == Expectation::miss && !turn.intent.empty())
    fail("a turn expected to miss has no intent: no earlier answer is its own");
  return turn;
}

}  // namespace

std::vector<DatasetConversation> read_followup_dataset(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(path + ": cannot read the dataset");
  std::vector<DatasetConversation> conversations;
  std::set<std::string> ids;
  std::set<std::string> intents_so_far;
  std::string text;
  for (size_t line = 1; std::getline(file, text); ++line) {
    auto fail = [&](const std::string& what) { throw DatasetError(path, line, what); };
    size_t start = text.find_first_not_of(" \t\r");
    if (start == std::string::npos || text[start] == '#') continue;
    json::error_code error;
    json::value parsed = json::parse(text, error);
    if (error) fail("not JSON: " + error.message());
    if (!parsed.is_object()) fail("a conversation must be an object");
    const json::object& object = parsed.as_object();
    check_keys(object, {"id", "system", "note", "turns"}, fail);
    DatasetConversation conversation;
    conversation.line = line;
    conversation.id = string_field(object, "id", true, fail);
    if (!ids.insert(conversation.id).second) fail("id \"" + conversation.id + "\" used twice");
    conversation.system = string_field(object, "system", false, fail);
    const json::value* turns = object.if_contains("turns");
    if (!turns || !turns->is_array() || turns->as_array().empty())
      fail("\"turns\" must be a list of at least one turn");
    for (const auto& value : turns->as_array()) {
      DatasetTurn turn = turn_of(value, fail);
      if (turn.expect == Expectation::hit && !intents_so_far.count(turn.intent))
        fail("intent \"" + turn.intent + "\" is expected to hit but no earlier question has it");
      if (!turn.intent.empty()) intents_so_far.insert(turn.intent);
      conversation.turns.push_back(std::move(turn));
    }
    conversations.push_back(std::move(conversation));
  }
  return conversations;
}

namespace {

// Which question a stored answer was first given to.
struct Origin {
  std::string meaning;  // the question's intent within what came before it
  std::string where;    // "conversation #turn 'question'", for reports
};

}  // namespace

FollowupScore score_followups(const std::vector<DatasetConversation>& conversations,
                              const AskCache& ask) {
  FollowupScore score;
  std::map<std::string, Origin> answers;
  for (const auto& conversation : conversations) {
    ++score.conversations;
    std::vector<Message> messages;
    if (!conversation.system.empty()) messages.push_back({"system", conversation.system});
    // What the conversation so far means: equal for conversations whose turns have the same
    // intents and the same answers, whatever their wording.
    std::string so_far = "system:" + conversation.system + "\n";
    for (size_t index = 0; index < conversation.turns.size(); ++index) {
      const DatasetTurn& turn = conversation.turns[index];
      std::string intent =
          turn.intent.empty() ? conversation.id + "#" + std::to_string(index + 1) : turn.intent;
      std::string meaning = so_far + intent;
      std::string where =
          conversation.id + " #" + std::to_string(index + 1) + " '" + turn.user + "'";
      messages.push_back({"user", turn.user});
      std::string answer;
      if (turn.assistant) {
        answer = *turn.assistant;
      } else {
        ++score.asked;
        ServedAnswer served = ask(messages);
        answer = served.text;
        bool right = false;
        if (served.from_cache) {
          auto origin = answers.find(served.text);
          right = origin != answers.end() && origin->second.meaning == meaning;
          if (!right) {
            ++score.wrong_answers;
            score.wrong.push_back(where + " got the answer to " +
                                  (origin == answers.end()
                                       ? "an unknown question ('" + served.text + "')"
                                       : origin->second.where));
          }
        } else if (!answers.emplace(served.text, Origin{meaning, where}).second) {
          throw std::runtime_error("the model gave the answer '" + served.text +
                                   "' twice: its answers must differ to tell them apart");
        }
        if (turn.expect == Expectation::hit) {
          ++score.repeats;
          if (right) {
            ++score.repeats_served;
          } else {
            score.missed_repeats.push_back(where);
          }
        } else if (turn.expect == Expectation::miss) {
          ++score.different;
          if (served.from_cache) ++score.different_served;
        }
      }
      messages.push_back({"assistant", answer});
      so_far += "user:" + intent + "\nassistant:" + answer + "\n";
    }
  }
  return score;
}

}  // namespace chatflow::cache
