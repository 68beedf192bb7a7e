// The `provider:` block of input_moderation and output_moderation: a moderation service or
// classifier model (framework/moderation/) that judges text beside the rule lists, its timeout,
// what each category it reports leads to, and what happens when it gives no verdict. The
// classifier's model is a pipeline resource (a gguf_model or an upstream engine), which is why
// this glue lives with the stages rather than in framework/moderation.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/api/registry.h"
#include "framework/moderation/moderation_provider.h"

namespace chatflow {

struct ModerationProviderConfig {
  std::string type;  // http | classifier; empty: no provider
  // http
  std::string url;
  std::string model;        // http: the body's "model"; classifier on upstream: the engine's
  std::string api_key_env;  // the environment variable holding the API key
  std::map<std::string, std::string> thresholds;  // category -> score from 0 to 1
  std::string ca_file;                            // https: whom to trust
  // classifier
  std::string gguf_model;
  std::string upstream;
  std::vector<std::string> categories;  // empty: Llama Guard 3's S1-S14
  int64_t max_tokens = 16;
  // both
  int64_t timeout_ms = 2000;
  std::string on_error = "fail_closed";
  std::map<std::string, std::string> actions;  // category -> the stage's action words
  int64_t threads = 4;
};

// The nested schema; `actions_doc` names the stage's actions.
SchemaBuilder<ModerationProviderConfig> moderation_provider_schema(const std::string& actions_doc);

// A verdict's tripped categories sorted by what the stage does with them.
struct Judgement {
  std::vector<std::string> acted;  // block (input) or retract (output)
  std::vector<std::string> noted;  // flag: let through, annotated
};

// A stage's provider, ready to check: the runner, the timeout and the policies.
class ModerationHook {
 public:
  ModerationHook(std::shared_ptr<moderation::ProviderRunner> runner,
                 std::chrono::milliseconds timeout, moderation::OnError on_error,
                 std::map<std::string, std::string> actions, std::string default_action);

  // Starts judging `text` now; the check's deadline is now + timeout.
  std::shared_ptr<moderation::PendingCheck> start(const Request& request, std::string text,
                                                  moderation::Speaker speaker,
                                                  std::string question = {}) const;

  // Runs `callback` on the provider's threads once `check` has its outcome (never inline).
  void when_settled(const std::shared_ptr<moderation::PendingCheck>& check,
                    std::function<void()> callback) const {
    runner_->when_settled(check, std::move(callback));
  }

  Judgement judge(const moderation::Verdict& verdict) const;
  moderation::OnError on_error() const { return on_error_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // "moderation provider 'screen' (http)"
  std::string describe() const;
  // Why `outcome` (not a verdict) is no verdict, for an error message: "gave no answer within
  // 500 ms", "failed: ...".
  std::string failure_text(const moderation::CheckOutcome& outcome) const;
  // The annotation value for a provider that gave no verdict: "timeout:fail_open", ...
  std::string error_note(const moderation::CheckOutcome& outcome) const;

 private:
  std::shared_ptr<moderation::ProviderRunner> runner_;
  std::chrono::milliseconds timeout_;
  moderation::OnError on_error_;
  std::map<std::string, std::string> actions_;
  std::string default_action_;
};

// Null when `config.type` is empty. `allowed_actions` are the stage's (the first acts, "flag"
// notes, "ignore" drops); `default_action` is what an unlisted category gets. Throws ConfigError.
std::shared_ptr<ModerationHook> make_moderation_hook(
    const ModerationProviderConfig& config, StageContext& context,
    const std::vector<std::string>& allowed_actions, const std::string& default_action);

// "a, b, c" ("" for none).
std::string join_names(const std::vector<std::string>& names, const std::string& separator = ", ");

}  // namespace chatflow
