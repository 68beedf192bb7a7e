#include "support/scripted_stream.h"

#include <memory>

namespace chatflow::testing {
namespace {

constexpr const char* kScriptAttachment = "test.stream_script";

class ScriptedStreamStage final : public RequestStage {
 public:
  Route process(Request& request, StageIo& io) override {
    auto script = request.attachment<StreamScript>(kScriptAttachment);
    if (!script) throw RequestFailure(500, "server_error", "the test attached no stream script");
    ChunkWriter writer = io.open_stream(0);
    for (const auto& chunk : script->chunks)
      writer.write(chunk);
    if (script->failure) writer.fail(*script->failure);
    return Route::streaming();
  }
};

}  // namespace

void attach_script(Request& request, StreamScript script) {
  request.attach(kScriptAttachment, std::make_shared<StreamScript>(std::move(script)));
}

Registry registry_with_scripted_stream() {
  Registry registry = builtin_registry();
  StageTypeBuilder<NoConfig> type("scripted_stream", StageKind::request,
                                  "streams the chunks the test attached to the request");
  type.port("out", PortKind::stream, "the scripted chunks");
  type.create(
      [](const NoConfig&, StageContext&) { return std::make_unique<ScriptedStreamStage>(); });
  registry.add(type.build());
  return registry;
}

}  // namespace chatflow::testing
