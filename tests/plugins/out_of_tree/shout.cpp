// Upper-cases the answer: the smallest stream stage, built out of tree.
#include <cctype>
#include <chatflow_plugin.hpp>
#include <string>

namespace {

class Shout final : public chatflow_plugin::StreamStage {
 public:
  explicit Shout(const chatflow_plugin::Config& config) : suffix_(config.string("suffix")) {}
  void chunk(chatflow_plugin::Request&, std::string_view text, bool last,
             chatflow_plugin::Output& out, void*) override {
    std::string loud(text);
    for (auto& c : loud)
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (last) loud += suffix_;
    out.emit(loud);
  }

 private:
  std::string suffix_;
};

const cf_config_key kKeys[] = {{"suffix", CF_VALUE_STRING, "!", 0, "added to the end"}};
const cf_stage_type kTypes[] = {
    chatflow_plugin::stream_stage_type<Shout>("shout", "Upper-cases the answer.", kKeys, 1)};

}  // namespace

CHATFLOW_PLUGIN("shout", "0.1.0", "MIT", "Upper-cases the answer", kTypes)
