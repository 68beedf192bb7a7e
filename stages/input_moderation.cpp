// input_moderation: checks what the user sent (and, when asked, retrieved passages) before any
// model sees it, against rule lists and, optionally, a moderation provider (an HTTP service in
// OpenAI's /v1/moderations shape or a Llama Guard-style classifier: moderation_provider.h).
// Text is normalised for the lists first (normalizer.h), so full-width letters, zero-width
// characters, odd case and separators between letters do not hide a phrase.
// Per list, and per provider category: `block` answers 400 content_filter; `flag` lets the
// request through, noted in the access log and metrics (annotation "moderation"). A passage
// that would be blocked is dropped. The provider judges the newest user message (the earlier
// ones were judged on their own turn) and the passages, all at once, while the request waits
// deferred (no pipeline thread is held); when it gives no verdict in time, `on_error` decides:
// fail_open lets the request through (annotation "moderation_error"), fail_closed answers 503
// moderation_unavailable.
#include <atomic>
#include <future>

#include "framework/limits/side_request_gate.h"
#include "framework/text/normalizer.h"
#include "stages/moderation_lists.h"
#include "stages/moderation_provider.h"

namespace chatflow {
namespace {

struct InputModerationConfig {
  std::map<std::string, std::string> lists;
  std::vector<std::string> roles = {"user"};
  bool passages = false;
  ModerationProviderConfig provider;
};

using moderation::CheckOutcome;
using moderation::PendingCheck;

// One request's provider checks, from the stage that starts them to the callback of the last
// one to end, which lets the request go on or fails it: the request waits deferred, without
// holding a pipeline thread. The hook belongs to the stage, which outlives every deferred
// request.
class Screening {
 public:
  Screening(const ModerationHook& provider, Continuation continuation,
            std::vector<std::string> flagged)
      : provider_(provider), continuation_(std::move(continuation)), flagged_(std::move(flagged)) {}

  // `passage`: the index of a retrieved passage, or -1 for the newest user message.
  void add(std::shared_ptr<PendingCheck> check, int passage) {
    checks_.emplace_back(std::move(check), passage);
  }

  static void start(const std::shared_ptr<Screening>& screening) {
    screening->remaining_ = screening->checks_.size();
    // A copy: the last callback may run (and clear the list) before this loop is through.
    auto checks = screening->checks_;
    for (auto& [check, passage] : checks)
      screening->provider_.when_settled(check, [screening] { screening->settled(); });
  }

 private:
  void settled() {
    if (remaining_.fetch_sub(1) != 1) return;
    try {
      finish();
    } catch (const std::exception& error) {
      continuation_.fail(RequestError{500,
                                      "server_error",
                                      std::string("input moderation failed: ") + error.what(),
                                      "stage_failed",
                                      {}});
    }
    checks_.clear();
  }

  void finish() {
    Request& request = continuation_.request();
    std::vector<bool> dropped(request.context_passages.size(), false);
    for (auto& [check, passage] : checks_) {
      CheckOutcome outcome = *check->poll();
      if (outcome.kind != CheckOutcome::Kind::verdict) {
        request.annotate("moderation_error", provider_.error_note(outcome));
        if (provider_.on_error() == moderation::OnError::fail_open) continue;
        return continuation_.fail(
            RequestError{503,
                         "server_error",
                         "the content filter could not check the request: " + provider_.describe() +
                             " " + provider_.failure_text(outcome) + "; retry later",
                         "moderation_unavailable",
                         {}});
      }
      Judgement judgement = provider_.judge(outcome.verdict);
      for (const auto& category : judgement.noted)
        flagged_.push_back((passage >= 0 ? "passage:" : "") + category);
      if (judgement.acted.empty()) continue;
      if (passage >= 0) {
        dropped[static_cast<size_t>(passage)] = true;
        continue;
      }
      request.annotate("moderation", "blocked:" + join_names(judgement.acted, ","));
      return continuation_.fail(RequestError{400, "invalid_request_error",
                                             "the request was blocked by the content filter (" +
                                                 provider_.describe() + ": " +
                                                 join_names(judgement.acted) + ")",
                                             "content_filter", "messages"});
    }
    size_t position = 0;
    std::erase_if(request.context_passages,
                  [&](const ContextPassage&) { return dropped[position++]; });
    if (!flagged_.empty()) request.annotate("moderation", "flagged:" + join_names(flagged_, ","));
    continuation_.resume(0);
  }

  const ModerationHook& provider_;
  Continuation continuation_;
  std::vector<std::string> flagged_;
  std::vector<std::pair<std::shared_ptr<PendingCheck>, int>> checks_;
  std::atomic<size_t> remaining_{0};
};

class InputModerationStage final : public RequestStage, public limits::SideRequestGate {
 public:
  InputModerationStage(std::vector<ActionList> lists, std::vector<std::string> roles, bool passages,
                       std::shared_ptr<ModerationHook> provider)
      : lists_(std::move(lists)),
        roles_(std::move(roles)),
        passages_(passages),
        provider_(std::move(provider)) {}

  Route process(Request& request, StageIo& io) override {
    std::vector<std::string> flagged;
    check_lists(request, flagged);
    // The provider judges the newest user message (earlier ones were judged on their turn).
    std::string newest =
        request.kind == RequestKind::completion ? request.prompt : request.last_user_message();
    bool judged =
        provider_ && (!newest.empty() || (passages_ && !request.context_passages.empty()));
    if (!judged) {
      if (!flagged.empty()) request.annotate("moderation", "flagged:" + join_names(flagged, ","));
      return Route::to(0);
    }
    auto screening = std::make_shared<Screening>(*provider_, io.defer(), std::move(flagged));
    if (!newest.empty())
      screening->add(provider_->start(request, newest, moderation::Speaker::user), -1);
    if (passages_) {
      for (size_t i = 0; i < request.context_passages.size(); ++i) {
        screening->add(
            provider_->start(request, request.context_passages[i].text, moderation::Speaker::user),
            static_cast<int>(i));
      }
    }
    Screening::start(screening);
    return Route::deferred();
  }

  // An embeddings or rerank call: each of its texts (user messages) is screened as a prompt is,
  // by the lists and by the provider, which this worker thread waits for.
  void admit_side_request(Request& request) override {
    std::vector<std::string> flagged;
    check_lists(request, flagged);
    if (provider_) {
      std::vector<std::shared_ptr<PendingCheck>> checks;
      for (const auto& message : request.messages)
        checks.push_back(provider_->start(request, message.content, moderation::Speaker::user));
      auto remaining = std::make_shared<std::atomic<size_t>>(checks.size());
      auto all_settled = std::make_shared<std::promise<void>>();
      std::future<void> settled = all_settled->get_future();
      for (const auto& check : checks) {
        provider_->when_settled(check, [remaining, all_settled] {
          if (remaining->fetch_sub(1) == 1) all_settled->set_value();
        });
      }
      if (!checks.empty()) settled.wait();
      for (const auto& check : checks)
        judge_side_text(request, *check->poll(), flagged);
    }
    if (!flagged.empty()) request.annotate("moderation", "flagged:" + join_names(flagged, ","));
  }

 private:
  void judge_side_text(Request& request, const CheckOutcome& outcome,
                       std::vector<std::string>& flagged) const {
    if (outcome.kind != CheckOutcome::Kind::verdict) {
      request.annotate("moderation_error", provider_->error_note(outcome));
      if (provider_->on_error() == moderation::OnError::fail_open) return;
      throw RequestFailure(
          RequestError{503,
                       "server_error",
                       "the content filter could not check the request: " + provider_->describe() +
                           " " + provider_->failure_text(outcome) + "; retry later",
                       "moderation_unavailable",
                       {}});
    }
    Judgement judgement = provider_->judge(outcome.verdict);
    flagged.insert(flagged.end(), judgement.noted.begin(), judgement.noted.end());
    if (judgement.acted.empty()) return;
    request.annotate("moderation", "blocked:" + join_names(judgement.acted, ","));
    throw RequestFailure(RequestError{400, "invalid_request_error",
                                      "the request was blocked by the content filter (" +
                                          provider_->describe() + ": " +
                                          join_names(judgement.acted) + ")",
                                      "content_filter", "input"});
  }

  void check_lists(Request& request, std::vector<std::string>& flagged) const {
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
  }

  std::vector<ActionList> lists_;
  std::vector<std::string> roles_;
  bool passages_;
  std::shared_ptr<ModerationHook> provider_;
};

StageTypeInfo input_moderation_stage_type() {
  StageTypeBuilder<InputModerationConfig> type(
      "input_moderation", StageKind::request,
      "Blocks (400 content_filter) or flags prompts that match rule lists, after Unicode "
      "normalisation, or that a moderation provider (HTTP service or classifier model) "
      "reports; can screen retrieved passages too.");
  type.port("out", PortKind::request, "requests that passed");
  type.config().key("lists", &InputModerationConfig::lists,
                    "rule list file -> block or flag (*.patterns files hold RE2 patterns)");
  type.config().key("roles", &InputModerationConfig::roles,
                    "message roles the rule lists check (the provider judges the newest user "
                    "message)");
  type.config().key("passages", &InputModerationConfig::passages,
                    "also check retrieved passages (indirect injection); blocked ones are dropped");
  type.config().object(
      "provider", &InputModerationConfig::provider,
      moderation_provider_schema("category -> block (the default), flag or ignore"),
      "a moderation service or classifier model judging the newest user "
      "message (and passages)");
  type.create([](const InputModerationConfig& config, StageContext& context) {
    if (config.lists.empty() && config.provider.type.empty())
      throw ConfigError("give 'lists', a 'provider', or both");
    return std::make_unique<InputModerationStage>(
        load_action_lists(config.lists, {"block", "flag"}), config.roles, config.passages,
        make_moderation_hook(config.provider, context, {"block", "flag", "ignore"}, "block"));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(input_moderation_stage_type);

}  // namespace
}  // namespace chatflow
