// uppercase: a stream stage that upper-cases the ASCII letters of every text delta. The
// smallest stage that rewrites a response stream; other characters pass through unchanged, so
// UTF-8 split across chunks is never damaged.
#include "framework/api/registry.h"

namespace chatflow {
namespace {

class UppercaseStage final : public StreamStage {
 public:
  void process(StreamContext& context, Chunk chunk) override {
    for (char& c : chunk.text) {
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    context.emit(std::move(chunk));
  }
};

StageTypeInfo uppercase_stage_type() {
  StageTypeBuilder<NoConfig> type("uppercase", StageKind::stream,
                                  "Upper-cases ASCII letters in the streamed text.");
  type.port("out", PortKind::stream, "the rewritten stream");
  type.create([](const NoConfig&, StageContext&) { return std::make_unique<UppercaseStage>(); });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(uppercase_stage_type);

}  // namespace
}  // namespace chatflow
