// The `classifier` moderation provider: a model asked, in Llama Guard's words, whether a
// conversation's last user message (input moderation) or last answer (output moderation) is
// safe under a list of categories, and answering "safe", or "unsafe" with the violated
// categories on a second line ("unsafe\nS1,S10"). Llama Guard 3 is trained on exactly this
// task prompt; any instruction-following model can be asked it too. The model itself is the
// caller's (a gguf_model or an upstream engine): the provider takes a function that generates.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/moderation/moderation_provider.h"

namespace chatflow::moderation {

// Llama Guard 3's hazard categories, "S1: Violent Crimes." to "S14: Code Interpreter Abuse.".
const std::vector<std::string>& llama_guard_categories();

// The task prompt: the categories (one per line, as given), the conversation ("User: ..." and,
// judging an answer, "Agent: ..."), and the instruction to answer safe or unsafe for the last
// message of `judged`.
std::string llama_guard_task(const std::vector<std::string>& categories, std::string_view user,
                             std::string_view agent, Speaker judged);

// "safe" or "unsafe" on the first non-empty line (any case, surrounding space ignored), the
// categories comma-separated on the next; nullopt with `error` for anything else.
std::optional<Verdict> parse_llama_guard_answer(std::string_view answer, std::string& error);

// Generates the model's answer to `task` (one user message) by the input's deadline; throws
// std::runtime_error when it cannot. Runs on the provider's threads.
using TaskGenerator = std::function<std::string(const std::string& task, const CheckInput& input)>;

class ClassifierProvider final : public ModerationProvider {
 public:
  // `model_name` names the model in messages ("gguf_model 'guard'").
  ClassifierProvider(TaskGenerator generate, std::vector<std::string> categories,
                     std::string model_name)
      : generate_(std::move(generate)),
        categories_(std::move(categories)),
        model_name_(std::move(model_name)) {}
  CheckOutcome check(const CheckInput& input) const override;
  std::string_view kind() const override { return "classifier"; }

 private:
  TaskGenerator generate_;
  std::vector<std::string> categories_;
  std::string model_name_;
};

}  // namespace chatflow::moderation
