// The filters over sequences: map, select and reject (and their attr forms), unique, sort,
// dictsort, reverse, sum, min, max, batch, groupby, items. Those jinja2 writes as generators
// return lazy iterables whose errors surface when consumed.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "framework/text/jinja/builtins.h"
#include "framework/text/jinja/filter_functions.h"
#include "framework/text/jinja/interpreter.h"
#include "framework/text/jinja/render_budget.h"
#include "framework/text/jinja/string_functions.h"

namespace chatflow::jinja::filters {

Value filter_items_eagerly(const Value& v, const Arguments&) {
  if (v.is_undefined()) return make_iterator({}, "generator");
  if (!v.is_dict()) raise_type_error("Can only get item pairs from a mapping.");
  List list;
  for (const auto& [key, value] : v.as_dict().entries)
    list.items.emplace_back(List{{key, value}, true, {}, {}});
  return make_iterator(std::move(list.items), "generator");
}

Value apply_filter_by_name(const std::string& name, const Value& item, const Arguments& arguments) {
  FilterFunction function = find_filter(name);
  if (!function)
    throw RenderError(RenderError::Kind::template_error, "No filter named '" + name + "'.");
  return function(item, arguments);
}

Value filter_map_eagerly(const Value& v, const Arguments& a) {
  List list;
  if (!truthy(v)) return make_iterator({}, "generator");  // jinja2 maps nothing over a false value
  const Value* attribute = nullptr;
  for (const auto& [key, value] : a.keyword) {
    if (key == "attribute") attribute = &value;
  }
  if (attribute) {
    const Value* fallback = nullptr;
    for (const auto& [key, value] : a.keyword) {
      if (key == "default") fallback = &value;
    }
    for (const Value& item : iterate(v)) {
      Value mapped = attribute_path(item, to_text(*attribute));
      list.items.push_back(mapped.is_undefined() && fallback ? *fallback : mapped);
    }
    return make_iterator(std::move(list.items), "generator");
  }
  if (a.positional.empty()) raise_type_error("map requires a filter argument");
  std::string name = to_text(a.positional[0]);
  Arguments rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(v))
    list.items.push_back(apply_filter_by_name(name, item, rest));
  return make_iterator(std::move(list.items), "generator");
}

bool run_test(const Arguments& a, size_t test_index, const Value& item) {
  if (a.positional.size() <= test_index) return truthy(item);
  std::string name = to_text(a.positional[test_index]);
  TestFunction function = find_test(name);
  if (!function)
    throw RenderError(RenderError::Kind::template_error, "No test named '" + name + "'.");
  Arguments rest;
  rest.positional.assign(a.positional.begin() + static_cast<ptrdiff_t>(test_index) + 1,
                         a.positional.end());
  rest.keyword = a.keyword;
  return function(item, rest);
}

Value select_items_eagerly(const Value& v, const Arguments& a, bool by_attribute, bool keep) {
  List list;
  if (!truthy(v))
    return make_iterator({}, "generator");  // jinja2 selects nothing from a false value
  std::string attribute = by_attribute ? string_argument(a, 0, "attr", "") : "";
  for (const Value& item : iterate(v)) {
    Value subject = by_attribute ? attribute_path(item, attribute) : item;
    if (run_test(a, by_attribute ? 1 : 0, subject) == keep) list.items.push_back(item);
  }
  return make_iterator(std::move(list.items), "generator");
}

Value filter_unique_eagerly(const Value& v, const Arguments& a);
Value filter_batch_eagerly(const Value& v, const Arguments& a);

// Filters jinja2 writes as generators: their errors wait until something consumes them.
template <typename Body>
Value lazily(Body body) {
  try {
    return body();
  } catch (const RenderError& error) {
    return make_failing_generator(error);
  }
}
Value filter_map(const Value& v, const Arguments& a) {
  return lazily([&] { return filter_map_eagerly(v, a); });
}
Value filter_unique(const Value& v, const Arguments& a) {
  return lazily([&] { return filter_unique_eagerly(v, a); });
}
Value filter_batch(const Value& v, const Arguments& a) {
  return lazily([&] { return filter_batch_eagerly(v, a); });
}
Value filter_items(const Value& v, const Arguments& a) {
  return lazily([&] { return filter_items_eagerly(v, a); });
}
Value select_items(const Value& v, const Arguments& a, bool by_attribute, bool keep) {
  return lazily([&] { return select_items_eagerly(v, a, by_attribute, keep); });
}

Value filter_select(const Value& v, const Arguments& a) {
  return select_items(v, a, false, true);
}
Value filter_reject(const Value& v, const Arguments& a) {
  return select_items(v, a, false, false);
}
Value filter_selectattr(const Value& v, const Arguments& a) {
  return select_items(v, a, true, true);
}
Value filter_rejectattr(const Value& v, const Arguments& a) {
  return select_items(v, a, true, false);
}

Value filter_unique_eagerly(const Value& v, const Arguments& a) {
  bool case_sensitive = truthy(argument(a, 0, "case_sensitive", Value(false)));
  const Value* attribute = a.find(1, "attribute");
  List list;
  std::vector<Value> seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(
        attribute && !attribute->is_none() ? attribute_path(item, to_text(*attribute)) : item,
        case_sensitive);
    bool duplicate = false;
    for (const Value& earlier : seen)
      duplicate = duplicate || equal(earlier, key);
    if (duplicate) continue;
    seen.push_back(key);
    list.items.push_back(item);
  }
  return make_iterator(std::move(list.items), "generator");
}

Value filter_reverse(const Value& v, const Arguments&) {
  if (v.is_string()) {
    std::vector<Value> characters = iterate(v);
    TrackedString out;
    for (auto it = characters.rbegin(); it != characters.rend(); ++it)
      out.append(it->as_tracked());
    return Value(std::move(out));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.is_list() && v.as_list().iterator_type.empty())
    return make_iterator(std::move(items), v.as_list().tuple ? "reversed" : "list_reverseiterator");
  return Value(List{std::move(items), false, {}, {}});
}

Value filter_sort(const Value& v, const Arguments& a) {
  bool reverse = truthy(argument(a, 0, "reverse", Value(false)));
  bool case_sensitive = truthy(argument(a, 1, "case_sensitive", Value(false)));
  const Value* attribute = a.find(2, "attribute");
  std::vector<Value> items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items)
    keyed.emplace_back(
        sort_key(
            attribute && !attribute->is_none() ? attribute_path(item, to_text(*attribute)) : item,
            case_sensitive),
        item);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  List list;
  for (auto& [key, item] : keyed)
    list.items.push_back(std::move(item));
  return Value(std::move(list));
}

Value filter_dictsort(const Value& v, const Arguments& a) {
  if (!v.is_dict()) raise_type_error("You can only sort by either 'key' or 'value' of a mapping");
  bool case_sensitive = truthy(argument(a, 0, "case_sensitive", Value(false)));
  bool by_value = string_argument(a, 1, "by", "key") == "value";
  bool reverse = truthy(argument(a, 2, "reverse", Value(false)));
  std::vector<std::pair<Value, Value>> entries = v.as_dict().entries;
  std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
    int order = compare(sort_key(by_value ? x.second : x.first, case_sensitive),
                        sort_key(by_value ? y.second : y.first, case_sensitive));
    return reverse ? order > 0 : order < 0;
  });
  List list;
  for (auto& [key, value] : entries)
    list.items.emplace_back(List{{key, value}, true, {}, {}});
  return Value(std::move(list));
}

Value filter_sum(const Value& v, const Arguments& a) {
  const Value* attribute = a.find(0, "attribute");
  Value total = argument(a, 1, "start", Value(int64_t{0}));
  for (const Value& item : iterate(v))
    total = binary_operation(
        BinaryOperator::add, total,
        attribute && !attribute->is_none() ? attribute_path(item, to_text(*attribute)) : item);
  return total;
}

Value extreme(const Value& v, const Arguments& a, bool maximum) {
  bool case_sensitive = truthy(argument(a, 0, "case_sensitive", Value(false)));
  const Value* attribute = a.find(1, "attribute");
  std::vector<Value> items = iterate(v);
  if (items.empty())
    return Value::undefined(std::string("No aggregated item, sequence was empty."));
  const Value* best = nullptr;
  Value best_key;
  for (const Value& item : items) {
    Value key = sort_key(
        attribute && !attribute->is_none() ? attribute_path(item, to_text(*attribute)) : item,
        case_sensitive);
    if (!best || (maximum ? compare(key, best_key) > 0 : compare(key, best_key) < 0)) {
      best = &item;
      best_key = key;
    }
  }
  return *best;
}
Value filter_max(const Value& v, const Arguments& a) {
  return extreme(v, a, true);
}
Value filter_min(const Value& v, const Arguments& a) {
  return extreme(v, a, false);
}

Value filter_batch_eagerly(const Value& v, const Arguments& a) {
  int64_t size = integer_argument(a, 0, "linecount", 1);
  if (size <= 0) throw RenderError(RenderError::Kind::value, "batch size must be positive");
  const Value* fill = a.find(1, "fill_with");
  List batches;
  List current;
  for (const Value& item : iterate(v)) {
    current.items.push_back(item);
    if (static_cast<int64_t>(current.items.size()) == size) {
      batches.items.emplace_back(std::move(current));
      current = List{};
    }
  }
  if (!current.items.empty()) {
    if (fill && !fill->is_none()) {
      RenderBudget::check_bytes(static_cast<uint64_t>(size) > SIZE_MAX / kItemBytes
                                    ? SIZE_MAX
                                    : static_cast<size_t>(size) * kItemBytes);
      while (static_cast<int64_t>(current.items.size()) < size)
        current.items.push_back(*fill);
    }
    batches.items.emplace_back(std::move(current));
  }
  return make_iterator(std::move(batches.items), "generator");
}

// Items grouped by an attribute, the groups sorted by it: (grouper, items) pairs.
Value filter_groupby(const Value& v, const Arguments& a) {
  std::string attribute = string_argument(a, 0, "attribute", "");
  const Value* fallback = a.find(1, "default");
  bool case_sensitive = truthy(argument(a, 2, "case_sensitive", Value(false)));
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(v)) {
    Value key = attribute_path(item, attribute);
    if (key.is_undefined() && fallback) key = *fallback;
    keyed.emplace_back(key, item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return compare(sort_key(x.first, case_sensitive), sort_key(y.first, case_sensitive)) < 0;
  });
  List groups;
  for (size_t i = 0; i < keyed.size();) {
    List members;
    size_t j = i;
    while (j < keyed.size() && equal(sort_key(keyed[j].first, case_sensitive),
                                     sort_key(keyed[i].first, case_sensitive)))
      members.items.push_back(keyed[j++].second);
    groups.items.emplace_back(List{{keyed[i].first, Value(std::move(members))}, true, {}, {}});
    i = j;
  }
  return Value(std::move(groups));
}

}  // namespace chatflow::jinja::filters
