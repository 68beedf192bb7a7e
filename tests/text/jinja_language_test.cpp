// The Jinja language as jinja2 documents it, with transformers' settings (trim_blocks,
// lstrip_blocks). Expected outputs are written by hand from jinja2's behaviour.
#include <gtest/gtest.h>

#include "framework/text/jinja/template.h"

namespace chatflow::jinja {
namespace {

std::string render(std::string_view source, const Dict& variables = {}) {
  return Template::parse(source).render(variables).text();
}

TEST(JinjaLanguage, PrintsLiteralText) {
  EXPECT_EQ(render("hello"), "hello");
}

}  // namespace
}  // namespace chatflow::jinja
