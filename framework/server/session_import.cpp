#include "framework/server/session_import.h"

#include <random>

#include <boost/json.hpp>

#include "framework/chat/request_body.h"
#include "framework/openai/openai_protocol.h"

namespace chatflow::server {
namespace json = boost::json;
using chat::request_body::Fields;
using chat::request_body::invalid;
using chat::request_body::kind_of;

namespace {

std::string message_text(const Fields& fields, const std::string& path) {
  const json::value* content = fields.get("content");
  if (!content) invalid("'" + path + ".content' is required", path + ".content");
  if (!content->is_string()) {
    invalid("'" + path + ".content' must be a string, got " + kind_of(*content), path + ".content");
  }
  return std::string(content->get_string());
}

}  // namespace

SessionImportRequest parse_session_import(std::string_view body) {
  json::value document = chat::request_body::parse_object(body);
  Fields fields(document.get_object());
  SessionImportRequest request;
  request.id = fields.string("id", "");
  openai::check_session_id(request.id, "id");
  if (const json::value* title = fields.get("title")) {
    // The same rules as a rename's title.
    request.title = openai::parse_session_title(json::serialize(json::object{{"title", *title}}));
  }
  const json::array* messages = fields.array("messages");
  if (!messages || messages->empty())
    invalid("'messages' is required and must not be empty", "messages");
  if (messages->size() > 2 * kMaxImportedTurns) {
    invalid("'messages' may hold at most " + std::to_string(2 * kMaxImportedTurns) +
                " messages, got " + std::to_string(messages->size()),
            "messages");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    std::string path = "messages[" + std::to_string(i) + "]";
    const json::object& message = chat::request_body::object_at((*messages)[i], path);
    Fields message_fields(message, path + ".");
    std::string role = message_fields.string("role", "");
    std::string_view expected = i % 2 == 0 ? "user" : "assistant";
    if (role != expected) {
      invalid("'" + path + ".role' must be " + std::string(expected) + ", got '" + role +
                  "': a session keeps questions and their answers, a user message then an "
                  "assistant message, from the first",
              path + ".role");
    }
    std::string text = message_text(message_fields, path);
    message_fields.refuse_unread({});
    if (i % 2 == 0) {
      request.turns.push_back({std::move(text), ""});
    } else {
      request.turns.back().assistant = std::move(text);
    }
  }
  if (messages->size() % 2 != 0) {
    invalid(
        "the last message is a question without an answer: a session's turns are answered "
        "(leave it out)",
        "messages[" + std::to_string(messages->size() - 1) + "]");
  }
  fields.refuse_unread({});
  return request;
}

std::string new_imported_session_id() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t bits = random();
  std::string id = "import-";
  for (int shift = 60; shift >= 0; shift -= 4)
    id += kHex[(bits >> shift) & 0xf];
  return id;
}

}  // namespace chatflow::server
