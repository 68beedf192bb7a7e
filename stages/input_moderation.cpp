// input_moderation: checks what the user sent (and, when asked, retrieved passages) against rule
// lists before any model sees it. Text is normalised first (normalizer.h), so full-width
// letters, zero-width characters, odd case and separators between letters do not hide a phrase.
// Per list: `block` answers 400 content_filter; `flag` lets the request through, noted in the
// access log and metrics (annotation "moderation"). A passage that hits a block list is dropped.
#include "framework/text/normalizer.h"
#include "stages/moderation_lists.h"

namespace chatflow {
namespace {

struct InputModerationConfig {
  std::map<std::string, std::string> lists;
  std::vector<std::string> roles = {"user"};
  bool passages = false;
};

class InputModerationStage final : public RequestStage {
 public:
  InputModerationStage(std::vector<ActionList> lists, std::vector<std::string> roles, bool passages)
      : lists_(std::move(lists)), roles_(std::move(roles)), passages_(passages) {}

  Route process(Request& request, StageIo&) override {
    std::vector<std::string> flagged;
    auto check = [&](const std::string& text, bool passage) {
      std::string normalized = text::normalize(text).text;
      bool drop = false;
      for (const auto& [list, action] : lists_) {
        if (!list->matches(normalized)) continue;
        if (action == "block" && !passage) {
          throw RequestFailure(RequestError{
              400, "invalid_request_error",
              "the request was blocked by the content filter (rule list '" + list->name() + "')",
              "content_filter", "messages"});
        }
        drop = drop || action == "block";
        flagged.push_back((passage ? "passage:" : "") + list->name());
      }
      return drop;
    };
    if (request.kind == RequestKind::completion) {
      check(request.prompt, false);
    } else {
      for (const auto& message : request.messages) {
        if (std::find(roles_.begin(), roles_.end(), message.role) != roles_.end())
          check(message.content, false);
      }
    }
    if (passages_) {
      // Indirect injection: a passage that would be blocked is left out of the prompt.
      std::erase_if(request.context_passages,
                    [&](const ContextPassage& passage) { return check(passage.text, true); });
    }
    if (!flagged.empty()) {
      std::string value;
      for (const auto& name : flagged)
        value += (value.empty() ? "" : ",") + name;
      request.annotate("moderation", "flagged:" + value);
    }
    return Route::to(0);
  }

 private:
  std::vector<ActionList> lists_;
  std::vector<std::string> roles_;
  bool passages_;
};

StageTypeInfo input_moderation_stage_type() {
  StageTypeBuilder<InputModerationConfig> type(
      "input_moderation", StageKind::request,
      "Blocks (400 content_filter) or flags prompts that match rule lists, after Unicode "
      "normalisation; can screen retrieved passages too.");
  type.port("out", PortKind::request, "requests that passed");
  type.config()
      .key("lists", &InputModerationConfig::lists,
           "rule list file -> block or flag (*.patterns files hold RE2 patterns)")
      .required();
  type.config().key("roles", &InputModerationConfig::roles, "message roles that are checked");
  type.config().key("passages", &InputModerationConfig::passages,
                    "also check retrieved passages (indirect injection); blocked ones are dropped");
  type.create([](const InputModerationConfig& config, StageContext&) {
    return std::make_unique<InputModerationStage>(
        load_action_lists(config.lists, {"block", "flag"}), config.roles, config.passages);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(input_moderation_stage_type);

}  // namespace
}  // namespace chatflow
