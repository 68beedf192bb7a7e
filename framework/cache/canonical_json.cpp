#include "framework/cache/canonical_json.h"

#include <algorithm>
#include <vector>

#include <boost/json.hpp>

namespace chatflow::cache {
namespace {

boost::json::value sorted(const boost::json::value& value) {
  if (value.is_array()) {
    boost::json::array items;
    for (const auto& item : value.get_array())
      items.push_back(sorted(item));
    return items;
  }
  if (!value.is_object()) return value;
  std::vector<const boost::json::key_value_pair*> members;
  for (const auto& member : value.get_object())
    members.push_back(&member);
  std::sort(members.begin(), members.end(),
            [](const auto* a, const auto* b) { return a->key() < b->key(); });
  boost::json::object ordered;  // keeps the order its members are added in
  for (const auto* member : members)
    ordered[member->key()] = sorted(member->value());
  return ordered;
}

}  // namespace

std::string canonical_json(std::string_view json) {
  boost::system::error_code error;
  boost::json::value value = boost::json::parse(json, error);
  if (error) return std::string(json);
  return boost::json::serialize(sorted(value));
}

}  // namespace chatflow::cache
