// A chat template compiled once and rendered many times: jinja2 as Hugging Face transformers
// configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls,
// raise_exception, strftime_now, json.dumps-style tojson).
//
//   auto chat = jinja::Template::parse(source);          // throws jinja::SyntaxError
//   TrackedString text = chat.render(variables);         // throws jinja::RenderError
//
// The rendering keeps which bytes the template wrote; variables the caller marks as template
// text (bos_token, eos_token) count as written by it, everything else as data.
#pragma once

#include <memory>
#include <string_view>

#include "framework/text/jinja/interpreter.h"
#include "framework/text/jinja/syntax_error.h"
#include "framework/text/jinja/tracked_string.h"
#include "framework/text/jinja/value.h"

namespace chatflow::jinja {

class Template {
 public:
  static Template parse(std::string_view source);

  TrackedString render(const Dict& variables, const Environment& environment = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace chatflow::jinja
