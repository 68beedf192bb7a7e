// JSON in one written form, for cache keys: a request's JSON-valued fields (chat_template_kwargs)
// say the same whatever order the client wrote their keys in and whatever space it put between.
#pragma once

#include <string>
#include <string_view>

namespace chatflow::cache {

// `json` with every object's members in key order and no space between tokens: equal for equal
// values however they were written; `json` itself when it is not JSON.
std::string canonical_json(std::string_view json);

}  // namespace chatflow::cache
