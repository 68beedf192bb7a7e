// Rule lists named in a moderation stage's config, `{file: action}`, loaded once per stage.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/api/registry.h"
#include "framework/moderation/rule_list.h"

namespace chatflow {

struct ActionList {
  std::shared_ptr<const moderation::RuleList> list;
  std::string action;
};

// Loads each file; an action outside `allowed` or an unreadable list is a ConfigError.
inline std::vector<ActionList> load_action_lists(const std::map<std::string, std::string>& lists,
                                                 const std::vector<std::string>& allowed) {
  std::vector<ActionList> loaded;
  for (const auto& [file, action] : lists) {
    if (std::find(allowed.begin(), allowed.end(), action) == allowed.end()) {
      std::string choices;
      for (const auto& choice : allowed)
        choices += (choices.empty() ? "" : ", ") + choice;
      throw ConfigError("list '" + file + "': action must be one of " + choices + ", got '" +
                        action + "'");
    }
    try {
      loaded.push_back({moderation::RuleList::load(file), action});
    } catch (const std::exception& error) {
      throw ConfigError(error.what());
    }
  }
  return loaded;
}

}  // namespace chatflow
