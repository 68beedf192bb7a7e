// tokenize: turns the request into prompt token ids. Chat requests go through the model's chat
// template (control tokens are recognised only in what the template wrote, never in user text);
// completion requests are encoded as they are.
#include "stages/gguf_model.h"

namespace chatflow {
namespace {

struct TokenizeConfig {
  std::string model;
  bool add_generation_prompt = true;
};

class TokenizeStage final : public RequestStage {
 public:
  explicit TokenizeStage(std::shared_ptr<GgufModel> model, bool add_generation_prompt)
      : model_(std::move(model)), add_generation_prompt_(add_generation_prompt) {}

  Route process(Request& request, StageIo&) override {
    PromptFacts facts;
    std::vector<int32_t> ids = model_->encode_prompt(request, add_generation_prompt_, &facts);
    request.reasoning = facts.reasoning;
    request.tool_format = facts.tool_format;
    request.prompt_tokens.assign(ids.begin(), ids.end());
    request.usage.prompt_tokens = static_cast<int64_t>(ids.size());
    return Route::to(0);
  }

 private:
  std::shared_ptr<GgufModel> model_;
  bool add_generation_prompt_;
};

StageTypeInfo tokenize_stage_type() {
  StageTypeBuilder<TokenizeConfig> type(
      "tokenize", StageKind::request,
      "Applies the chat template and encodes the prompt with the model's tokenizer.");
  type.port("out", PortKind::request, "the request with its prompt tokens");
  type.config()
      .key("model", &TokenizeConfig::model, "a gguf_model resource")
      .required()
      .resource("gguf_model");
  type.config().key("add_generation_prompt", &TokenizeConfig::add_generation_prompt,
                    "end chat prompts with the assistant's turn opening");
  type.create([](const TokenizeConfig& config, StageContext& context) {
    return std::make_unique<TokenizeStage>(context.resource<GgufModel>(config.model),
                                           config.add_generation_prompt);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(tokenize_stage_type);

}  // namespace
}  // namespace chatflow
