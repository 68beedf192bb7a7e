#include "framework/moderation/openai_moderation.h"

#include <algorithm>

#include <boost/json.hpp>

namespace chatflow::moderation {
namespace json = boost::json;

std::string moderation_request_body(std::string_view text, const std::string& model) {
  json::object body{{"input", text}};
  if (!model.empty()) body["model"] = model;
  return json::serialize(body);
}

namespace {

void add_category(Verdict& verdict, const std::string& name) {
  verdict.flagged = true;
  if (std::find(verdict.categories.begin(), verdict.categories.end(), name) ==
      verdict.categories.end())
    verdict.categories.push_back(name);
}

// One element of "results" into `verdict`; false with `error` set when it is not readable.
bool read_result(const json::value& value, size_t index,
                 const std::map<std::string, double>& thresholds, Verdict& verdict,
                 std::string& error) {
  std::string where = "results[" + std::to_string(index) + "]";
  if (!value.is_object()) {
    error = where + " is not an object";
    return false;
  }
  const json::object& result = value.as_object();
  const json::object* scores = nullptr;
  if (const json::value* found = result.if_contains("category_scores"); found) {
    if (!found->is_object()) {
      error = where + ".category_scores is not an object";
      return false;
    }
    scores = &found->as_object();
  }
  auto score_of = [&](const std::string& name) -> std::optional<double> {
    if (!scores) return std::nullopt;
    const json::value* score = scores->if_contains(name);
    if (!score || !score->is_number()) return std::nullopt;
    return score->to_number<double>();
  };
  const json::value* categories = result.if_contains("categories");
  if (!categories || categories->is_null()) {
    const json::value* flagged = result.if_contains("flagged");
    if (!flagged || !flagged->is_bool()) {
      error = where + " has neither \"categories\" nor a boolean \"flagged\"";
      return false;
    }
    verdict.flagged = verdict.flagged || flagged->as_bool();
    for (const auto& [name, threshold] : thresholds) {
      if (auto score = score_of(name); score && *score >= threshold) add_category(verdict, name);
    }
    return true;
  }
  if (!categories->is_object()) {
    error = where + ".categories is not an object";
    return false;
  }
  for (const auto& [key, marked] : categories->as_object()) {
    std::string name(key);
    if (!marked.is_bool() && !marked.is_null()) {
      error = where + ".categories." + name + " is not a boolean";
      return false;
    }
    bool tripped = marked.is_bool() && marked.as_bool();
    if (auto threshold = thresholds.find(name); threshold != thresholds.end()) {
      if (auto score = score_of(name)) tripped = *score >= threshold->second;
    }
    if (tripped) add_category(verdict, name);
  }
  // A threshold for a category the service scores without listing it.
  for (const auto& [name, threshold] : thresholds) {
    if (categories->as_object().contains(name)) continue;
    if (auto score = score_of(name); score && *score >= threshold) add_category(verdict, name);
  }
  return true;
}

}  // namespace

std::optional<Verdict> parse_moderation_response(std::string_view body,
                                                 const std::map<std::string, double>& thresholds,
                                                 std::string& error) {
  json::error_code parse_error;
  json::value parsed = json::parse(body, parse_error);
  if (parse_error || !parsed.is_object()) {
    error = "the answer is not a JSON object";
    return std::nullopt;
  }
  const json::object& object = parsed.as_object();
  if (const json::value* failure = object.if_contains("error"); failure && !failure->is_null()) {
    const json::value* message =
        failure->is_object() ? failure->as_object().if_contains("message") : failure;
    error = "the service answered an error";
    if (message && message->is_string()) error += ": " + std::string(message->as_string());
    return std::nullopt;
  }
  const json::value* results = object.if_contains("results");
  if (!results || !results->is_array() || results->as_array().empty()) {
    error = "the answer has no \"results\" list";
    return std::nullopt;
  }
  Verdict verdict;
  size_t index = 0;
  for (const auto& result : results->as_array()) {
    if (!read_result(result, index++, thresholds, verdict, error)) return std::nullopt;
  }
  return verdict;
}

CheckOutcome HttpModerationProvider::check(const CheckInput& input) const {
  tools::HttpPost post;
  post.endpoint = &settings_.endpoint;
  post.body = moderation_request_body(input.text, settings_.model);
  post.headers = {{"Content-Type", "application/json"}};
  if (!settings_.api_key.empty())
    post.headers.emplace_back("Authorization", "Bearer " + settings_.api_key);
  if (!input.request_id.empty()) post.headers.emplace_back("X-Request-Id", input.request_id);
  post.deadline = input.deadline;
  post.max_body_bytes = settings_.max_response_bytes;
  post.cancelled = input.abandoned;
  post.tls = settings_.tls.get();
  tools::HttpOutcome answer = tools::post(post);
  std::string where = settings_.url + ": ";
  using Kind = tools::HttpOutcome::Kind;
  switch (answer.kind) {
    case Kind::response:
      break;
    case Kind::timed_out:
      return CheckOutcome::timeout(where + answer.error);
    case Kind::cancelled:
      return CheckOutcome::failure(where + "abandoned");
    case Kind::connect_failed:
      return CheckOutcome::failure(where + "could not connect: " + answer.error);
    case Kind::failed:
      return CheckOutcome::failure(where + answer.error);
  }
  if (answer.status != 200) {
    return CheckOutcome::failure(where + "HTTP " + std::to_string(answer.status) +
                                 (answer.body.empty() ? "" : ": " + answer.body.substr(0, 200)));
  }
  std::string error;
  std::optional<Verdict> verdict =
      parse_moderation_response(answer.body, settings_.thresholds, error);
  if (!verdict) return CheckOutcome::failure(where + error);
  return CheckOutcome::of(std::move(*verdict));
}

}  // namespace chatflow::moderation
