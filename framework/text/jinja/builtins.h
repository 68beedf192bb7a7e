// The filters and tests templates can name, looked up when a template is parsed so that an
// unknown one fails at load, as in jinja2.
#pragma once

#include <string_view>

#include "framework/text/jinja/value.h"

namespace chatflow::jinja {

using FilterFunction = Value (*)(const Value& operand, const Arguments& arguments);
using TestFunction = bool (*)(const Value& operand, const Arguments& arguments);

// nullptr when there is no such filter or test.
FilterFunction find_filter(std::string_view name);
TestFunction find_test(std::string_view name);

}  // namespace chatflow::jinja
