// clock_tool: a tool type (plugin ABI 1.1) that tells an agent's model what time it is, which
// a model cannot know by itself. Declare it as a resource and give it to a tool:
//
//   resources:
//     clock: {type: clock, utc_offset_minutes: 60}
//   ...agent config...
//     tools:
//       - {name: current_time, description: The date and time now., resource: clock}
//
// The answer is JSON: {"time": "2026-12-01T18:05:00+01:00"}.
#include <cstdio>
#include <ctime>
#include <string>

#include "chatflow_plugin.hpp"

namespace {

class Clock final : public chatflow_plugin::Tool {
 public:
  explicit Clock(const chatflow_plugin::Config& config)
      : offset_minutes_(config.integer("utc_offset_minutes")) {
    if (offset_minutes_ < -14 * 60 || offset_minutes_ > 14 * 60)
      throw std::invalid_argument("'utc_offset_minutes' must be between -840 and 840");
  }

  std::string call(const chatflow_plugin::ToolCall&) override {
    std::time_t now = std::time(nullptr) + offset_minutes_ * 60;
    std::tm local{};
    gmtime_r(&now, &local);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &local);
    long hours = std::labs(offset_minutes_) / 60;
    long minutes = std::labs(offset_minutes_) % 60;
    char zone[24];
    std::snprintf(zone, sizeof zone, "%c%02ld:%02ld", offset_minutes_ < 0 ? '-' : '+', hours,
                  minutes);
    return std::string("{\"time\": \"") + stamp + zone + "\"}";
  }

 private:
  long offset_minutes_;
};

const cf_config_key kKeys[] = {
    {"utc_offset_minutes", CF_VALUE_INTEGER, "0", 0, "the time zone, in minutes east of UTC"},
};

const cf_tool_type kTools[] = {
    chatflow_plugin::tool_type<Clock>("clock", "The current date and time, as JSON.", kKeys, 1),
};

}  // namespace

CHATFLOW_TOOL_PLUGIN("clock_tool", "1.0.0", "MIT", "Tells an agent the current time", kTools)
