// decode: opens the response stream and connects it to the generation prefill started. From
// here the engine writes one chunk per generated token into the stream stages, in order.
#include "stages/gguf_model.h"

namespace chatflow {
namespace {

struct DecodeConfig {
  std::string model;
};

class DecodeStage final : public RequestStage {
 public:
  Route process(Request& request, StageIo& io) override {
    auto stream = request.attachment<GenerationStream>(kGenerationAttachment);
    if (!stream) {
      throw RequestFailure(
          RequestError{500,
                       "server_error",
                       "decode found no generation: the pipeline needs a prefill stage before it",
                       {},
                       {}});
    }
    stream->attach(io.open_stream(kOut));
    return Route::streaming();
  }

 private:
  static constexpr PortId kOut = 0;
};

StageTypeInfo decode_stage_type() {
  StageTypeBuilder<DecodeConfig> type(
      "decode", StageKind::request,
      "Streams the generated tokens of the request's generation as chunks.");
  type.port("out", PortKind::stream, "one chunk per generated token");
  type.config()
      .key("model", &DecodeConfig::model, "a gguf_model resource")
      .required()
      .resource("gguf_model");
  type.create([](const DecodeConfig& config, StageContext& context) {
    context.resource<GgufModel>(
        config.model);  // checks the reference; the generation carries the model
    return std::make_unique<DecodeStage>();
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(decode_stage_type);

}  // namespace
}  // namespace chatflow
