// uppercase: a stream stage that upper-cases the ASCII letters of every text delta, the answer's
// and its reasoning's. The smallest stage that rewrites a response stream; other characters pass
// through unchanged, so UTF-8 split across chunks is never damaged, and tool calls pass as they
// are (their arguments are data, not prose).
#include "framework/api/registry.h"

namespace chatflow {
namespace {

void upper_case(std::string& text) {
  for (char& c : text) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
}

class UppercaseStage final : public StreamStage {
 public:
  void process(StreamContext& context, Chunk chunk) override {
    upper_case(chunk.text);
    upper_case(chunk.reasoning);
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
