// Python's two string formatting languages: `fmt % args` and `fmt.format(...)`. The format's own
// text keeps its provenance; substituted values keep theirs.
#pragma once

#include "framework/text/jinja/value.h"

namespace chatflow::jinja {

// Throws RenderError (TypeError, ValueError) as Python would.
TrackedString percent_format(const TrackedString& format, const Value& arguments);
TrackedString brace_format(const TrackedString& format, const Arguments& arguments);

}  // namespace chatflow::jinja
