#include "framework/server/session_search.h"

#include <optional>

#include <boost/json.hpp>

#include "framework/text/normalizer.h"
#include "framework/text/utf8.h"

namespace chatflow::server {
namespace json = boost::json;
namespace {

// How much of the text around a hit a result shows, in bytes (cut back to whole characters).
constexpr size_t kContextBefore = 60;
constexpr size_t kContextAfter = 120;

// White space of any length as one space: a snippet is one line.
std::string one_line(std::string_view text) {
  std::string line;
  bool space = false;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
      space = true;
      continue;
    }
    if (space) line += ' ';
    space = false;
    line += c;
  }
  if (space) line += ' ';
  return line;
}

bool continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// The hit's place in `original`, or nullopt.
std::optional<std::pair<size_t, size_t>> find_in(std::string_view original,
                                                 const std::string& key) {
  text::NormalizedText folded = text::normalize(original);
  size_t at = folded.text.find(key);
  if (at == std::string::npos) return std::nullopt;
  return folded.original_span(at, at + key.size(), original);
}

json::object match_json(std::string_view original, std::pair<size_t, size_t> hit) {
  auto [begin, end] = hit;
  size_t from = begin > kContextBefore ? begin - kContextBefore : 0;
  while (from < begin && continuation_byte(original[from]))
    ++from;
  std::string_view tail = original.substr(end, kContextAfter);
  tail = tail.substr(0, text::complete_prefix_length(tail));
  std::string before = one_line(original.substr(from, begin - from));
  std::string after = one_line(tail);
  if (from > 0) before = "…" + before;
  if (end + tail.size() < original.size()) after += "…";
  return {{"before", text::repair(before)},
          {"text", text::repair(one_line(original.substr(begin, end - begin)))},
          {"after", text::repair(after)}};
}

std::string_view string_member(const json::object& object, std::string_view name) {
  const json::value* value = object.if_contains(name);
  return value && value->is_string() ? std::string_view(value->get_string()) : std::string_view();
}

// Where `key` first appears in an exported session: its title, then its turns in order.
std::optional<json::object> first_match(const json::object& session, const std::string& key) {
  std::string_view title = string_member(session, "title");
  if (auto hit = find_in(title, key)) {
    json::object match = match_json(title, *hit);
    match["in"] = "title";
    return match;
  }
  const json::value* turns = session.if_contains("turns");
  if (!turns || !turns->is_array()) return std::nullopt;
  int64_t index = 0;
  for (const json::value& turn : turns->get_array()) {
    if (turn.is_object()) {
      for (std::string_view side : {"user", "assistant"}) {
        std::string_view said = string_member(turn.get_object(), side);
        if (auto hit = find_in(said, key)) {
          json::object match = match_json(said, *hit);
          match["in"] = side;
          match["turn"] = index;
          return match;
        }
      }
    }
    ++index;
  }
  return std::nullopt;
}

}  // namespace

std::string search_key(std::string_view query) {
  return text::normalize(query).text;
}

json::object search_sessions(HistoryReader& history, const std::string& tenant,
                             const std::string& owner, const std::string& key, size_t limit) {
  json::array data;
  bool has_more = false;
  history.export_sessions(tenant, owner, [&](const std::string& line) {
    if (has_more) return;
    json::value parsed = json::parse(line);
    const json::object& session = parsed.as_object();
    auto match = first_match(session, key);
    if (!match) return;
    if (data.size() == limit) {
      has_more = true;
      return;
    }
    const json::value* turns = session.if_contains("turns");
    data.push_back(json::object{
        {"id", session.at("id")},
        {"object", "session"},
        {"title", session.at("title")},
        {"created_at", session.at("created_at")},
        {"updated_at", session.at("updated_at")},
        {"turns", turns && turns->is_array() ? static_cast<int64_t>(turns->get_array().size()) : 0},
        {"match", std::move(*match)}});
  });
  return {{"object", "list"}, {"data", std::move(data)}, {"has_more", has_more}};
}

}  // namespace chatflow::server
