// The Python methods templates call on strings, dicts and lists (message.content.strip(),
// tool.items(), ...). The sandbox withholds every method that mutates a list or dict, as
// jinja2's ImmutableSandboxedEnvironment does.
#pragma once

#include <optional>
#include <string_view>

#include "framework/text/jinja/value.h"

namespace chatflow::jinja {

// The bound method; an unsafe Undefined for a mutating one; nullopt when the type has none.
std::optional<Value> find_method(const Value& self, std::string_view name);

}  // namespace chatflow::jinja
