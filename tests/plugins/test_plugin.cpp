// Plugins that misbehave, for the loader's tests; TEST_PLUGIN_KIND picks how:
//   1 built for ABI major 2; 2 built for a newer minor; 3 no entry point;
//   4 stages that throw (request, stream) or fail on purpose.
#include <stdexcept>

#include "chatflow_plugin.hpp"

#if TEST_PLUGIN_KIND != 3

namespace {

class Thrower final : public chatflow_plugin::RequestStage {
 public:
  explicit Thrower(const chatflow_plugin::Config& config) : mode_(config.string("mode")) {}
  int process(chatflow_plugin::Request& request) override {
    if (mode_ == "throw") throw std::runtime_error("boom");
    if (mode_ == "refuse") throw chatflow_plugin::Failure("this question is not allowed here");
    if (mode_ == "bad_port") return 7;
    request.annotate("thrower", "passed");
    return 0;
  }

 private:
  std::string mode_;
};

class StreamThrower final : public chatflow_plugin::StreamStage {
 public:
  explicit StreamThrower(const chatflow_plugin::Config&) {}
  void chunk(chatflow_plugin::Request&, std::string_view text, bool, chatflow_plugin::Output& out,
             void*) override {
    if (text.find("explode") != std::string_view::npos) throw std::runtime_error("stream boom");
    out.emit(text);
  }
};

const cf_port kPorts[] = {{"out", "the request"}};
const cf_config_key kKeys[] = {
    {"mode", CF_VALUE_STRING, "pass", 0, "pass, throw, refuse, bad_port"}};
const cf_stage_type kTypes[] = {chatflow_plugin::request_stage_type<Thrower>(
                                    "test_thrower", "Throws on demand.", kPorts, 1, kKeys, 1),
                                chatflow_plugin::stream_stage_type<StreamThrower>(
                                    "test_stream_thrower", "Throws on 'explode'.", nullptr, 0)};

}  // namespace

extern "C" __attribute__((visibility("default"))) const cf_plugin_descriptor*
chatflow_plugin_descriptor(void) {
  static const cf_plugin_descriptor descriptor = {
#if TEST_PLUGIN_KIND == 1
    2,
    0,
#elif TEST_PLUGIN_KIND == 2
    CHATFLOW_PLUGIN_ABI_MAJOR,
    CHATFLOW_PLUGIN_ABI_MINOR + 7,
#else
    CHATFLOW_PLUGIN_ABI_MAJOR,
    CHATFLOW_PLUGIN_ABI_MINOR,
#endif
    "test_plugin",
    "0.1",
    "MIT",
    "stages that fail on purpose",
    kTypes,
    2,
    nullptr,
    0
  };
  return &descriptor;
}

#else

extern "C" int not_a_chatflow_plugin(void) {
  return 42;
}

#endif
