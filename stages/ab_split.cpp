// ab_split: an experiment. Each request goes to one arm (a port named after it), chosen by a
// stable hash of `key` (the user by default; then the session, the tenant, the request id when
// the key is empty), so a user stays in one arm while the weights stay the same. The arm is
// annotated (`arm`: the access log, per-arm metrics) and returned as `x-chatflow-arm`.
//
// `key: end_user` splits by the body's OpenAI `user` field: an app server with one key that
// passes its end users' labels puts each of them in an arm of their own. The label is the
// client's to choose, so the arm is too: assignment is an experiment's bookkeeping, never a
// security decision (never grant or withhold anything by arm).
//
//   - {name: experiment, type: ab_split, config: {key: user, arms: {control: 50, bm25_heavy: 50}}}
//   edges: [experiment.control -> rerank_a, experiment.bm25_heavy -> rerank_b]
#include <cctype>
#include <cmath>
#include <cstdio>

#include "framework/api/registry.h"
#include "framework/text/hash.h"

namespace chatflow {
namespace {

struct AbSplitConfig {
  std::string key = "user";
  std::map<std::string, std::string> arms;  // name -> weight
  std::string salt;                         // default: the stage's name
};

struct Arm {
  std::string name;
  double upper = 0;  // cumulative share, in (0, 1]
};

std::vector<Arm> arms_of(const AbSplitConfig& config) {
  if (config.arms.size() < 2)
    throw ConfigError("'arms' needs at least two arms, e.g. {a: 50, b: 50}");
  if (config.arms.size() > kMaxPorts)
    throw ConfigError("at most " + std::to_string(kMaxPorts) + " arms");
  std::vector<Arm> arms;
  double total = 0;
  for (const auto& [name, weight_text] : config.arms) {
    bool valid = !name.empty() && std::islower(static_cast<unsigned char>(name[0]));
    for (char c : name)
      valid = valid && (std::islower(static_cast<unsigned char>(c)) ||
                        std::isdigit(static_cast<unsigned char>(c)) || c == '_');
    if (!valid)
      throw ConfigError("arm '" + name + "': arm names are lower_snake_case (they name ports)");
    char* end = nullptr;
    double weight = std::strtod(weight_text.c_str(), &end);
    if (end == weight_text.c_str() || *end != '\0' || !(weight >= 0) || std::isinf(weight))
      throw ConfigError("arm '" + name + "': the weight must be a number >= 0, got '" +
                        weight_text + "'");
    total += weight;
    arms.push_back({name, total});
  }
  if (total <= 0) throw ConfigError("the arms' weights add up to 0");
  for (auto& arm : arms)
    arm.upper /= total;
  arms.back().upper = 1.0;
  return arms;
}

class AbSplitStage final : public RequestStage {
 public:
  AbSplitStage(AbSplitConfig config, std::string salt)
      : config_(std::move(config)), arms_(arms_of(config_)), salt_(std::move(salt)) {}

  Route process(Request& request, StageIo&) override {
    std::string subject = key_of(request);
    // The top 53 bits as a fraction in [0, 1).
    double position =
        static_cast<double>(avalanche(fnv1a(salt_ + '\x1f' + subject)) >> 11) * 0x1.0p-53;
    size_t chosen = 0;
    while (chosen + 1 < arms_.size() && position >= arms_[chosen].upper)
      ++chosen;
    request.annotate("arm", arms_[chosen].name);
    request.set_response_header("x-chatflow-arm", arms_[chosen].name);
    return Route::to(static_cast<PortId>(chosen));
  }

 private:
  std::string key_of(const Request& request) const {
    const Identity& who = request.identity;
    // The label is scoped by tenant: two tenants' "alice" are different people.
    if (config_.key == "end_user" && !request.end_user.empty())
      return "end_user:" + who.tenant + '/' + request.end_user;
    // Without a label an end_user split keys as `user` does, so an unlabelled caller still
    // keeps one arm.
    bool by_user = config_.key == "user" || config_.key == "end_user";
    if (by_user && !who.user.empty()) return "user:" + who.tenant + '/' + who.user;
    if (config_.key != "tenant" && !request.session_id.empty())
      return "session:" + who.tenant + '/' + request.session_id;
    if (!who.tenant.empty()) return "tenant:" + who.tenant;
    return "request:" + request.id;
  }

  AbSplitConfig config_;
  std::vector<Arm> arms_;
  std::string salt_;
};

StageTypeInfo ab_split_stage_type() {
  StageTypeBuilder<AbSplitConfig> type(
      "ab_split", StageKind::request,
      "An A/B experiment: sends each request to one arm (a port per arm) by a stable hash of "
      "the user, the client's end-user label, the session or the tenant, with weights; the arm is "
      "annotated and returned as "
      "x-chatflow-arm.");
  type.port("arm", PortKind::request, "(one port per arm, named in 'arms')");
  type.no_default_port();
  type.ports_from_config([](const AbSplitConfig& config) {
    std::vector<PortInfo> ports;
    for (const auto& arm : arms_of(config))
      ports.push_back({arm.name, PortKind::request, "the requests of arm " + arm.name});
    return ports;
  });
  type.config()
      .key("key", &AbSplitConfig::key,
           "what keeps a caller in one arm: user, end_user (the body's `user` label, chosen by "
           "the client), session or tenant")
      .choices({"user", "end_user", "session", "tenant"});
  type.config()
      .key("arms", &AbSplitConfig::arms, "arm name -> weight (any positive numbers)")
      .required();
  type.config().key("salt", &AbSplitConfig::salt,
                    "changes the assignment (default: the stage's name, so two experiments "
                    "split independently)");
  type.create([](const AbSplitConfig& config, StageContext& context) {
    return std::make_unique<AbSplitStage>(config,
                                          config.salt.empty() ? context.stage_name() : config.salt);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(ab_split_stage_type);

}  // namespace
}  // namespace chatflow
