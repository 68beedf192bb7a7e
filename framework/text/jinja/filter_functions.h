// What the filter files share: argument helpers and the sequence filters, registered in
// filters.cpp's table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "framework/text/jinja/value.h"

namespace chatflow::jinja::filters {

Value argument(const Arguments& arguments, size_t index, std::string_view name, Value fallback);
std::string string_argument(const Arguments& arguments, size_t index, std::string_view name,
                            std::string fallback);
int64_t integer_argument(const Arguments& arguments, size_t index, std::string_view name,
                         int64_t fallback);
// jinja2's attribute paths: "a.b.0" looks up a, then b, then item 0.
Value attribute_path(const Value& item, const std::string& path);
// For sorting and uniqueness: strings folded to lower case unless case-sensitive.
Value sort_key(const Value& value, bool case_sensitive);

Value filter_map(const Value& v, const Arguments& a);
Value filter_select(const Value& v, const Arguments& a);
Value filter_reject(const Value& v, const Arguments& a);
Value filter_selectattr(const Value& v, const Arguments& a);
Value filter_rejectattr(const Value& v, const Arguments& a);
Value filter_unique(const Value& v, const Arguments& a);
Value filter_reverse(const Value& v, const Arguments& a);
Value filter_sort(const Value& v, const Arguments& a);
Value filter_dictsort(const Value& v, const Arguments& a);
Value filter_sum(const Value& v, const Arguments& a);
Value filter_max(const Value& v, const Arguments& a);
Value filter_min(const Value& v, const Arguments& a);
Value filter_batch(const Value& v, const Arguments& a);
Value filter_groupby(const Value& v, const Arguments& a);
Value filter_items(const Value& v, const Arguments& a);

}  // namespace chatflow::jinja::filters
