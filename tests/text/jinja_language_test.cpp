// The Jinja language as jinja2 documents it, with transformers' settings (trim_blocks,
// lstrip_blocks, loop controls, the immutable sandbox). Expected outputs are written by hand
// from jinja2's behaviour.
#include <chrono>
#include <memory>
#include <optional>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/text/jinja/chat_inputs.h"
#include "framework/text/jinja/json.h"
#include "framework/text/jinja/render_budget.h"
#include "framework/text/jinja/template.h"

namespace chatflow::jinja {
namespace {

std::string render(std::string_view source, const Dict& variables = {}) {
  return Template::parse(source).render(variables).text();
}

Dict with(std::string_view name, Value value) {
  Dict variables;
  variables.set(Value::data_string(std::string(name)), std::move(value));
  return variables;
}

Dict with_json(std::string_view name, std::string_view json) {
  return with(name, from_json(boost::json::parse(json)));
}

std::string render_error(std::string_view source, const Dict& variables = {}) {
  try {
    render(source, variables);
  } catch (const RenderError& error) {
    return error.what();
  }
  return "(no error)";
}

SyntaxError syntax_error(std::string_view source) {
  try {
    Template::parse(source);
  } catch (const SyntaxError& error) {
    return error;
  }
  ADD_FAILURE() << "parsed: " << source;
  return SyntaxError({0, 0}, "");
}

TEST(JinjaLanguage, PrintsLiteralTextAndExpressions) {
  EXPECT_EQ(render("hello"), "hello");
  EXPECT_EQ(render("{{ 1 + 2 }} {{ 'a' ~ 1 }} {{ 7 * 7 }}"), "3 a1 49");
}

TEST(JinjaLanguage, PrintsPythonValues) {
  EXPECT_EQ(
      render("{{ none }} {{ true }} {{ False }} {{ 1.0 }} {{ 2.5 }} {{ 10 / 4 }} {{ 4 / 2 }}"),
      "None True False 1.0 2.5 2.5 2.0");
  EXPECT_EQ(render("{{ [1, 'a', none] }} {{ {'k': 'v', 'n': 1} }} {{ (1,) }}"),
            "[1, 'a', None] {'k': 'v', 'n': 1} (1,)");
  EXPECT_EQ(render("{{ 1e20 }} {{ 0.0001 }} {{ 0.00001 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }}"),
            "1e+20 0.0001 1e-05 3 -4 2");
  EXPECT_EQ(render("{{ \"it's\" }} {{ [\"it's\"] }}"), "it's [\"it's\"]");
}

TEST(JinjaLanguage, UndefinedPrintsNothingButRaisesOnAttributes) {
  EXPECT_EQ(render("[{{ missing }}]"), "[]");
  EXPECT_EQ(render("{{ missing is defined }} {{ missing is undefined }}"), "False True");
  EXPECT_EQ(render_error("{{ missing.attribute }}"), "'missing' is undefined");
  EXPECT_EQ(render("[{{ d.nope }}]", with_json("d", "{}")), "[]");
  EXPECT_EQ(render_error("{{ d.nope.deeper }}", with_json("d", "{}")),
            "'dict object' has no attribute 'nope'");
  EXPECT_EQ(render("{{ missing | length }} {{ missing | default('x') }}"), "0 x");
}

TEST(JinjaLanguage, TrimBlocksAndLstripBlocksAsTransformersSetsThem) {
  EXPECT_EQ(render("{% if true %}\n  yes\n{% endif %}\nafter"), "  yes\nafter");
  EXPECT_EQ(render("line\n    {% if true %}x{% endif %}\n"), "line\nx");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("a\n  {%- if true %} b{% endif %}"), "a b");
  EXPECT_EQ(render("x  {%+ if true %}y{% endif %}"), "x  y");
  EXPECT_EQ(render("{% if true +%}\nz{% endif %}"), "\nz");
  EXPECT_EQ(render("  {# comment #}\nnext"), "next");
  EXPECT_EQ(render("a {{ 'b' }}\n  c"), "a b\n  c");
}

TEST(JinjaLanguage, LineBreaksAreNormalisedAndTheLastOneDropped) {
  EXPECT_EQ(render("hello\n"), "hello");
  EXPECT_EQ(render("hello\n\n"), "hello\n");
  EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
  EXPECT_EQ(render("{% if true %}\r\nx\r\n{% endif %}\r\nend\r\n"), "x\nend");
}

TEST(JinjaLanguage, IfElifElse) {
  const char* source = "{% if n > 2 %}big{% elif n == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(render(source, with("n", Value(3))), "big");
  EXPECT_EQ(render(source, with("n", Value(2))), "two");
  EXPECT_EQ(render(source, with("n", Value(1.5))), "small");
}

TEST(JinjaLanguage, ForLoopVariables) {
  EXPECT_EQ(
      render("{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
             "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
      "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}"),
            "-2 1-3 2- ");
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.cycle('odd','even') }} {% endfor %}"),
            "odd even odd ");
}

TEST(JinjaLanguage, ForLoopElseFilterBreakAndContinue) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }} {% endfor %}"),
            "15 35 55 75 95 ");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "013");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}"),
            "a=1 b=2 ");
  EXPECT_EQ(render("{% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}"), "za");
}

TEST(JinjaLanguage, RecursiveLoops) {
  auto tree = with_json("tree", R"([{"name": "a", "children": [{"name": "b", "children": []},
      {"name": "c", "children": [{"name": "d"}]}]}, {"name": "e"}])");
  EXPECT_EQ(render("{% for item in tree recursive %}[{{ item.name }}{{ loop.depth }}"
                   "{% if item.children %}{{ loop(item.children) }}{% endif %}]{% endfor %}",
                   tree),
            "[a1[b2][c2[d3]]][e1]");
}

TEST(JinjaLanguage, SetInsideALoopDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}"
                   "{% endfor %}{{ ns.x }}"),
            "4");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set block %}in {{ 'side' }}{% endset %}[{{ block }}]"), "[in side]");
  EXPECT_EQ(render("{% set shout | upper %}quiet{% endset %}{{ shout }}"), "QUIET");
}

TEST(JinjaLanguage, MacrosWithDefaultsAndCaller) {
  EXPECT_EQ(render("{% macro greet(name, punctuation='!') %}Hi {{ name }}{{ punctuation }}"
                   "{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', punctuation='?') }}"),
            "Hi Ann! Hi Bob?");
  EXPECT_EQ(render("{% macro wrap() %}<{{ caller() }}>{% endmacro %}"
                   "{% call wrap() %}inside{% endcall %}"),
            "<inside>");
  EXPECT_EQ(render("{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}"
                   "{% endmacro %}{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}"),
            "[1][2]");
}

TEST(JinjaLanguage, WithOpensAScope) {
  EXPECT_EQ(render("{% set a = 1 %}{% with a = a + 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}{{ a "
                   "}}[{{ b }}]"),
            "2x1[]");
}

TEST(JinjaLanguage, JoinerCyclerAndBlocks) {
  EXPECT_EQ(
      render(
          "{% set comma = joiner(', ') %}{% for x in [1, 2, 3] %}{{ comma() }}{{ x }}{% endfor %}"),
      "1, 2, 3");
  EXPECT_EQ(render("{% set row = cycler('odd', 'even') %}{% for x in [1, 2, 3] %}{{ row.next() }} "
                   "{% endfor %}{{ row.current }}"),
            "odd even odd even");
  EXPECT_EQ(render("a{% block body %}b{% endblock %}c{% block tail scoped %}d{% endblock tail %}"),
            "abcd");
}

TEST(JinjaLanguage, StringLiteralsUsePythonEscapes) {
  EXPECT_EQ(render("{{ 'a\\\nb' }}|{{ \"tab\\there\" }}|{{ '\\u00e9\\x41' }}"),
            "ab|tab\there|\u00e9A");
}

TEST(JinjaLanguage, MacrosRefuseArgumentsTheyCannotTake) {
  EXPECT_EQ(render_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
            "macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(render_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, b=2) }}"),
            "macro 'm' takes no keyword argument 'b'");
  EXPECT_EQ(render("{% macro m(a) %}{{ a }}{{ varargs }}{% endmacro %}{{ m(1, 2) }}"), "1(2,)");
}

TEST(JinjaLanguage, StringFilters) {
  EXPECT_EQ(render("{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}"), "a b|a");
  EXPECT_EQ(render("{{ 'hello world' | title }} {{ 'hELLO' | capitalize }} {{ 'ab' | upper }}"),
            "Hello World Hello AB");
  EXPECT_EQ(render("{{ 'a-b c(d' | title }}"), "A-B C(D");
  EXPECT_EQ(render("{{ 'aXbXc' | replace('X', '-') }} {{ 'aaa' | replace('a', 'b', 2) }}"),
            "a-b-c bba");
  EXPECT_EQ(render("{{ 'héllo' | length }} {{ 'héllo' | upper }}"), "5 HÉLLO");
  EXPECT_EQ(render("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"),
            "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(render("{{ '<a href=\"x\">' | e }}"), "&lt;a href=&#34;x&#34;&gt;");
  EXPECT_EQ(render("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-2] }} {{ 'héllo'[1] }} {{ [1,2,3][-1] }}"),
            "bcd fdb é 3");
}

TEST(JinjaLanguage, StringMethods) {
  EXPECT_EQ(render("{{ ' x '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}"),
            "x|['a', 'b', '', 'c']|['a', 'b']");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }}"), "True True");
  EXPECT_EQ(render("{{ '{} and {name}'.format(1, name='two') }} {{ '%s-%d' % ('a', 3) }}"),
            "1 and two a-3");
  EXPECT_EQ(render("{{ 'a-b-c'.rsplit('-', 1) }} {{ 'Hello'.lower() }} {{ 'x'.upper() }}"),
            "['a-b', 'c'] hello X");
}

TEST(JinjaLanguage, SequenceFilters) {
  EXPECT_EQ(render("{{ [3, 1, 2] | sort | join(',') }} {{ [1, 2] | first }} {{ [1, 2] | last }}"),
            "1,2,3 1 2");
  EXPECT_EQ(render("{{ ['a', 'A', 'b'] | unique | list }} {{ [1, 2, 3] | reverse | list }}"),
            "['a', 'b'] [3, 2, 1]");
  auto users =
      with_json("users", R"([{"name": "a", "admin": true}, {"name": "b", "admin": false}])");
  EXPECT_EQ(render("{{ users | map(attribute='name') | join('+') }}", users), "a+b");
  EXPECT_EQ(render("{{ users | selectattr('admin') | map(attribute='name') | list }}", users),
            "['a']");
  EXPECT_EQ(render("{{ users | rejectattr('name', 'equalto', 'a') | list | length }}", users), "1");
  EXPECT_EQ(
      render("{{ [1, 2, 3, 4] | select('even') | list }} {{ ['a', 'B'] | map('upper') | list }}"),
      "[2, 4] ['A', 'B']");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | dictsort }} {{ {'a': 1} | items | list }}"),
            "[('a', 2), ('b', 1)] [('a', 1)]");
  EXPECT_EQ(render("{{ [1, 2] | sum }} {{ [3, 1] | max }} {{ 'ab' | list }}"), "3 3 ['a', 'b']");
}

TEST(JinjaLanguage, NumberFilters) {
  EXPECT_EQ(render("{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int(7) }} {{ 3 | float }}"),
            "42 4 7 3.0");
  EXPECT_EQ(render("{{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }} "
                   "{{ 5 | round }}"),
            "2.0 3.14 3.0 5");
  EXPECT_EQ(render("{{ 1 | string }}{{ -3 | abs }}"), "13");
}

TEST(JinjaLanguage, TojsonIsPythonsJsonDumps) {
  auto data = with_json("d", R"({"b": [1, 2.5, null, true], "a": "é\"<>", "c": {}})");
  EXPECT_EQ(render("{{ d | tojson }}", data),
            R"({"b": [1, 2.5, null, true], "a": "é\"<>", "c": {}})");
  EXPECT_EQ(render("{{ d | tojson(sort_keys=true) }}", data),
            R"({"a": "é\"<>", "b": [1, 2.5, null, true], "c": {}})");
  EXPECT_EQ(render("{{ d.b | tojson(indent=2) }}", data), "[\n  1,\n  2.5,\n  null,\n  true\n]");
  EXPECT_EQ(render("{{ d.a | tojson(ensure_ascii=true) }}", data), R"("\u00e9\"<>")");
  EXPECT_EQ(render("{{ d | tojson(separators=(',', ':')) }}", data),
            R"({"b":[1,2.5,null,true],"a":"é\"<>","c":{}})");
}

TEST(JinjaLanguage, Tests) {
  EXPECT_EQ(
      render("{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}"
             "{{ {} is mapping }}{{ [] is iterable }}{{ 'x' is sequence }}{{ none is none }}"),
      "TrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(
      render("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}"
             "{{ 'a' is in 'cat' }}{{ 2 is equalto 3 }}{{ true is boolean }}{{ 1 is not none }}"),
      "TrueTrueTrueTrueTrueFalseTrueTrue");
}

TEST(JinjaLanguage, PythonOperatorSemantics) {
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 'a' == 'a' }} {{ [1] == [1] }} {{ 1 == '1' }} {{ 'b' in "
                   "['a', 'b'] }}"),
            "True True True False True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not [] }} {{ 'ab' * 2 }} {{ [1] + [2] }}"),
            "x y True abab [1, 2]");
  EXPECT_EQ(render("{{ 'yes' if 1 < 2 < 3 else 'no' }} {{ 2 ** 10 }} {{ -2 | abs }}"),
            "yes 1024 2");
}

TEST(JinjaLanguage, DictMethods) {
  auto data = with_json("d", R"({"a": 1, "b": 2})");
  EXPECT_EQ(
      render("{{ d.get('a') }} {{ d.get('z', 'none') }} {{ d.keys() | list }} {{ d['b'] }}", data),
      "1 none ['a', 'b'] 2");
}

TEST(JinjaLanguage, TheSandboxRefusesMutation) {
  auto data = with_json("l", "[1]");
  EXPECT_EQ(render_error("{{ l.append(2) }}", data),
            "access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render_error("{% set d = {} %}{{ d.update({'a': 1}) }}"),
            "access to attribute 'update' of 'dict' object is unsafe.");
}

TEST(JinjaLanguage, RaiseExceptionCarriesTheTemplatesMessage) {
  EXPECT_EQ(render_error("{{ raise_exception('Conversation roles must alternate') }}"),
            "Conversation roles must alternate");
}

TEST(JinjaLanguage, StrftimeNowUsesTheInjectedClock) {
  Environment environment;
  environment.now = [] {
    std::tm time{};
    time.tm_year = 124;
    time.tm_mon = 6;
    time.tm_mday = 26;
    return time;
  };
  EXPECT_EQ(Template::parse("{{ strftime_now('%d %b %Y') }}").render({}, environment).text(),
            "26 Jul 2024");
}

TEST(JinjaErrors, UnknownTagIsReportedWithLineAndColumn) {
  SyntaxError error = syntax_error("line one\n  {% do something %}");
  EXPECT_EQ(error.position().line, 2);
  EXPECT_EQ(error.position().column, 6);
  EXPECT_NE(error.message().find("unknown tag 'do'"), std::string::npos) << error.what();
}

TEST(JinjaErrors, UnknownFilterFailsAtLoad) {
  SyntaxError error = syntax_error("{{ x | frobnicate }}");
  EXPECT_EQ(error.position().line, 1);
  EXPECT_EQ(error.position().column, 8);
  EXPECT_NE(error.message().find("no filter named 'frobnicate'"), std::string::npos);
}

TEST(JinjaErrors, UnclosedBlockNamesWhatWasExpected) {
  SyntaxError error = syntax_error("{% for x in y %}\nbody");
  EXPECT_NE(error.message().find("'endfor'"), std::string::npos) << error.what();
  SyntaxError unterminated = syntax_error("text {{ 'abc }}");
  EXPECT_EQ(unterminated.position().column, 9);
}

TEST(JinjaErrors, UnknownTestAndBadExpressions) {
  EXPECT_NE(syntax_error("{{ x is frob }}").message().find("no test named 'frob'"),
            std::string::npos);
  SyntaxError error = syntax_error("{% if %}{% endif %}");
  EXPECT_EQ(error.position().column, 7);
  EXPECT_NE(syntax_error("{{ 1 + }}").message().find("unexpected"), std::string::npos);
}

TEST(JinjaErrors, NestingTooDeepIsRefusedNotACrash) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(syntax_error(deep).message().find("nesting deeper than"), std::string::npos);
  EXPECT_EQ(render("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}"), "1");
}

// 20,000 links of one kind after `x`, on the template's second line.
std::string chain(std::string_view link) {
  std::string source = "line one\n{{ x";
  for (int i = 0; i < 20000; ++i)
    source += link;
  return source + " }}";
}

TEST(JinjaErrors, LongChainsAreSyntaxErrorsWithTheirPositionNotAStackOverflow) {
  for (std::string_view link : {" + 1", " ~ 'a'", "|string", ".attribute", "[0]", "()"}) {
    SyntaxError error = syntax_error(chain(link));
    EXPECT_EQ(error.position().line, 2) << link;
    EXPECT_GT(error.position().column, 3) << link;
    EXPECT_NE(error.message().find("expression nested deeper than 256 levels"), std::string::npos)
        << link << ": " << error.what();
  }
  std::string long_but_fine = "{{ 'a'";
  for (int i = 0; i < 200; ++i)
    long_but_fine += " ~ 'a'";
  EXPECT_EQ(render(long_but_fine + " }}"), std::string(201, 'a'));
}

std::string render_error_within(std::string_view source, const RenderLimits& limits) {
  Environment environment;
  environment.limits = limits;
  try {
    Template::parse(source).render({}, environment);
  } catch (const RenderError& error) {
    EXPECT_EQ(error.kind(), RenderError::Kind::limit) << error.what();
    return error.what();
  }
  return "(no error)";
}

TEST(JinjaLimits, TextOverTheSizeBudgetIsARenderError) {
  // 20 MiB of output from a loop, and 100 MB in one string: each over the default 16 MiB.
  EXPECT_NE(render_error("{% for i in range(100000) %}{{ 'x' * 210 }}{% endfor %}")
                .find("more than 16 MiB"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 'x' * 100000000 }}").find("more than 16 MiB"), std::string::npos);
  EXPECT_NE(render_error("{{ [1, 2] * 10000000 }}").find("more than 16 MiB"), std::string::npos);
  EXPECT_NE(render_error("{{ '%9999999999999s' % 'x' }}").find("more than 16 MiB"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 'x'.center(99999999999) }}").find("more than 16 MiB"),
            std::string::npos);
  EXPECT_NE(render_error("{{ [[[1]]]|tojson(indent=10000000) }}").find("more than 16 MiB"),
            std::string::npos);
  EXPECT_NE(render_error("{{ [1]|batch(10**12, 'x')|list|length }}").find("more than 16 MiB"),
            std::string::npos);
  RenderLimits small;
  small.max_bytes = 1000;
  EXPECT_NE(render_error_within("{{ 'y' * 600 }}{{ 'y' * 600 }}", small).find("1000 bytes"),
            std::string::npos);
  EXPECT_EQ(render("{% for i in range(1000) %}{{ 'x' * 100 }}{% endfor %}").size(), 100000u);
}

TEST(JinjaLimits, NothingRepeatedAndWidePaddingCostNoTime) {
  EXPECT_EQ(render("[{{ '' * 10**12 }}{{ [] * 10**12 }}]"), "[[]]");
  EXPECT_EQ(render("{{ ('%01000000d' % 7)|length }}"), "1000000");
}

TEST(JinjaLimits, StepsAndTimeAreBounded) {
  const char* forever =
      "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
  RenderLimits steps;
  steps.max_steps = 100000;
  EXPECT_NE(render_error_within(forever, steps).find("more than 100000 steps"), std::string::npos);
  RenderLimits time;
  time.max_time = std::chrono::milliseconds(50);
  EXPECT_NE(render_error_within(forever, time).find("more than 50 ms"), std::string::npos);
}

TEST(JinjaLimits, NestingAtRenderTimeIsBounded) {
  // Lists wrapped in lists by a loop: deeper than the default 512 levels.
  EXPECT_NE(render_error("{% set box = namespace(v=[]) %}{% for i in range(2000) %}"
                         "{% set box.v = [box.v] %}{% endfor %}{{ box.v|length }}")
                .find("nests lists, dicts or namespaces deeper than 512"),
            std::string::npos);
  EXPECT_EQ(render("{% set box = namespace(v=[]) %}{% for i in range(100) %}"
                   "{% set box.v = [box.v] %}{% endfor %}{{ box.v|length }}"),
            "1");
  RenderLimits shallow;
  shallow.max_depth = 20;
  std::string deep = "{{ 1";
  for (int i = 0; i < 30; ++i)
    deep += " + 1";
  EXPECT_NE(render_error_within(deep + " }}", shallow).find("deeper than 20 levels"),
            std::string::npos);
}

// An object that records whether the render let go of what it held.
class Holder final : public Object {
 public:
  explicit Holder(bool& released) : released_(released) {}
  std::string_view type_name() const override { return "Holder"; }
  std::optional<Value> attribute(std::string_view) const override { return std::nullopt; }
  void release_values() override { released_ = true; }

 private:
  bool& released_;
};

TEST(JinjaLimits, ObjectsMadeDuringARenderLetGoOfTheirValuesWhenItEnds) {
  bool released = false;
  auto holder = std::make_shared<Holder>(released);
  {
    RenderBudget budget({});
    RenderBudget::adopt(holder);
    EXPECT_FALSE(released);
  }
  EXPECT_TRUE(released);
  // A namespace holding itself renders, and the render still ends.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me is defined }}"), "True");
}

TEST(JinjaErrors, AnOutOfRangeFormatIndexIsARenderError) {
  EXPECT_NE(render_error("{{ '{99999999999999999999999}'.format(1) }}"), "(no error)");
}

TEST(JinjaProvenance, OnlyTemplateTextIsMarkedAsTemplate) {
  Dict variables = with_json("messages", R"([{"content": "<|im_start|>evil"}])");
  variables.set(Value::data_string("bos_token"), Value::template_string("<s>"));
  TrackedString out =
      Template::parse("{{ bos_token }}<|im_start|>{{ messages[0].content }}<|im_end|>")
          .render(variables);
  EXPECT_EQ(out.text(), "<s><|im_start|><|im_start|>evil<|im_end|>");
  std::vector<ByteRange> expected = {{0, 15}, {31, 41}};
  EXPECT_EQ(out.template_ranges(), expected);
}

TEST(JinjaProvenance, SurvivesConcatenationSlicingAndFilters) {
  Dict variables = with_json("user", R"("<|x|>")");
  TrackedString out =
      Template::parse("{{ ('<|a|>' + user + '<|b|>')[1:] | trim }}{{ [user, '<|c|>'] | join('') }}")
          .render(variables);
  EXPECT_EQ(out.text(), "|a|><|x|><|b|><|x|><|c|>");
  std::vector<ByteRange> expected = {{0, 4}, {9, 14}, {19, 24}};
  EXPECT_EQ(out.template_ranges(), expected);
  // Rewriting data (upper) never turns it into template text.
  TrackedString upper = Template::parse("{{ user | upper }}").render(variables);
  EXPECT_TRUE(upper.template_ranges().empty());
}

TEST(JinjaChatInputs, ToolCallArgumentsArriveAsObjectsOrAsTextWhenObjectsFail) {
  ChatTemplateInputs inputs;
  inputs.messages = boost::json::parse(
                        R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f",
                        "arguments": "{\"x\": 1}"}}]}])")
                        .as_array();
  auto object_template =
      Template::parse("{{ messages[0].tool_calls[0].function.arguments.x }} {{ tools }}");
  EXPECT_EQ(render_chat_template(object_template, inputs).text(), "1 None");
  auto text_template =
      Template::parse("{{ 'args: ' + messages[0].tool_calls[0].function.arguments }}");
  EXPECT_EQ(render_chat_template(text_template, inputs).text(), "args: {\"x\": 1}");
}

}  // namespace
}  // namespace chatflow::jinja
