// prefill: admits the request's prompt into the model's scheduler. The request waits (deferred)
// while its prompt is computed, possibly in chunks beside other requests' decoding; the first
// generated token ends prefill and moves the request on to decode: that moment is the time to
// first token.
#include "stages/gguf_model.h"

namespace chatflow {
namespace {

struct PrefillConfig {
  std::string model;
};

class PrefillStage final : public RequestStage {
 public:
  explicit PrefillStage(std::shared_ptr<GgufModel> model) : model_(std::move(model)) {}

  Route process(Request& request, StageIo& io) override {
    if (request.prompt_tokens.empty()) {
      throw RequestFailure(RequestError{
          500,
          "server_error",
          "prefill found no prompt tokens: the pipeline needs a tokenize stage before it",
          {},
          {}});
    }
    request.attach(kGenerationAttachment, model_->start(request, io, kOut));
    return Route::deferred();
  }

 private:
  static constexpr PortId kOut = 0;
  std::shared_ptr<GgufModel> model_;
};

StageTypeInfo prefill_stage_type() {
  StageTypeBuilder<PrefillConfig> type(
      "prefill", StageKind::request,
      "Computes the prompt in the model's scheduler; continues at the first token.");
  type.port("out", PortKind::request, "the request, once its first token exists");
  type.config()
      .key("model", &PrefillConfig::model, "a gguf_model resource")
      .required()
      .resource("gguf_model");
  type.create([](const PrefillConfig& config, StageContext& context) {
    return std::make_unique<PrefillStage>(context.resource<GgufModel>(config.model));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(prefill_stage_type);

}  // namespace
}  // namespace chatflow
