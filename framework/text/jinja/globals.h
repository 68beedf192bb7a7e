// The names every template sees besides its variables: jinja2's range, namespace, dict, joiner
// and cycler, and transformers' raise_exception and strftime_now.
#pragma once

#include <optional>
#include <string_view>

#include "framework/text/jinja/value.h"

namespace chatflow::jinja {

struct Environment;

std::optional<Value> find_global(std::string_view name, const Environment& environment);

}  // namespace chatflow::jinja
