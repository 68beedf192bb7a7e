#include "framework/text/jinja/template.h"

#include "framework/text/jinja/parser.h"

namespace chatflow::jinja {

Template Template::parse(std::string_view source) {
  return Template(std::make_shared<const Body>(parse_template(source)));
}

TrackedString Template::render(const Dict& variables, const Environment& environment) const {
  Interpreter interpreter(variables, environment);
  return interpreter.render(*body_);
}

}  // namespace chatflow::jinja
