// The Jinja interpreter's constructs, and its errors: every syntax or
// evaluation error is an Error(kInvalidArgument) that names the template, the
// line (and column) and the construct. The full comparison with jinja2 is in
// tests/python/test_chat_template_constructs.py.
#include <gtest/gtest.h>

#include "core/error.h"
#include "text/jinja/template.h"

namespace tessera::text::jinja {
namespace {

std::string render(const std::string& source, Map variables = {}) {
  return Template(source, "test").render(variables);
}

// The Error a template throws when compiled and rendered.
Error render_error(const std::string& source) {
  try {
    render(source);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << source;
  return Error(ErrorKind::kInternal, "");
}

TEST(textJinjaTemplate, OutputsAndOperators) {
  EXPECT_EQ(render("a{{ 1 + 2 * 3 }}b"), "a7b");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 8 }}"), "3 -4 2 3.5 256");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true }}"), "a1NoneTrue");
  EXPECT_EQ(render("{{ [1, 'a', none, 2.0, {'k': \"it's\"}] }}"), "[1, 'a', None, 2.0, {'k': \"it's\"}]");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ 1 == 1.0 }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 'y' if none else 'n' }} {{ none or 'x' }} {{ 0 and 1 }}"), "n x 0");
}

TEST(textJinjaTemplate, VariablesAttributesAndSlices) {
  Map message;
  message.set("role", Value("user"));
  message.set("content", Value("héllo"));
  Map variables;
  variables.set("m", Value(message));
  variables.set("l", Value(List{Value(1), Value(2), Value(3)}));
  EXPECT_EQ(render("{{ m.role }} {{ m['content'] }} [{{ m.missing }}] {{ m.get('x', 'd') }}", variables),
            "user héllo [] d");
  EXPECT_EQ(render("{{ l[1:] }} {{ l[::-1] }} {{ l[-1] }} {{ m.content[1:3] }} {{ m.content|length }}", variables),
            "[2, 3] [3, 2, 1] 3 él 5");
  EXPECT_EQ(render("{{ nothing is defined }} {{ nothing|default('d') }} [{{ nothing }}]"), "False d []");
}

TEST(textJinjaTemplate, LoopsScopesAndMacros) {
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.first }}{{ loop.last }}/{% endfor %}"),
            "1TrueFalse/2FalseFalse/3FalseTrue/");
  EXPECT_EQ(render("{% for x in [1, 2] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}"), "-2;1-;");
  EXPECT_EQ(render("{% for x in [1, 2, 3] if x != 2 %}{{ x }}{{ loop.length }}{% endfor %}"), "1232");
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1, 2] %}{% set x = x + i %}{% endfor %}{{ x }}"), "0");
  EXPECT_EQ(render("{% set ns = namespace(x=0) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}"
                   "{{ ns.x }}"),
            "3");
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(b=2, a=3) }}"), "1B32");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "1");
}

TEST(textJinjaTemplate, WhitespaceControlAsTransformersRendersIt) {
  // trim_blocks drops the newline after a tag; lstrip_blocks the indentation before one.
  EXPECT_EQ(render("a\n    {% if true %}\n    b\n    {% endif %}\nc"), "a\n    b\nc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("{{ 'x' }}\n{# note #}\ny\n"), "x\ny");  // one trailing newline is dropped
  EXPECT_EQ(render("  {%+ if true %}k{% endif %}"), "  k");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(textJinjaTemplate, FiltersAndTests) {
  EXPECT_EQ(render("{{ '  x  '|trim }}|{{ 'ab'|upper }}|{{ [3, 1]|sort|join(',') }}|{{ {'a': [1, 'é']}|tojson }}"),
            "x|AB|1,3|{\"a\": [1, \"é\"]}");
  EXPECT_EQ(render("{{ {'a': 1}|tojson(indent=2) }}"), "{\n  \"a\": 1\n}");
  EXPECT_EQ(render("{{ [{'r': 'u'}, {'r': 'a'}]|selectattr('r', 'equalto', 'u')|list|length }}"), "1");
  EXPECT_EQ(render("{{ 1 is number }} {{ 'a' is string }} {{ {} is mapping }} {{ none is none }} "
                   "{{ [] is iterable }} {{ 4 is even }}"),
            "True True True True True True");
  EXPECT_EQ(render("{{ 'a,b'.split(',') }} {{ 'Ab'.startswith('A') }} {{ '{}-{}'.format(1, 2) }}"),
            "['a', 'b'] True 1-2");
}

TEST(textJinjaTemplate, SyntaxErrorsNameLineAndConstruct) {
  Error e = render_error("{% for m in messages %}\n{{ m }}\n{% endif %}");
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("test: line 3"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("endif"), std::string::npos) << e.message();

  e = render_error("ok\n{{ x | no_such_filter }}");
  EXPECT_NE(e.message().find("line 2, column"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("no filter named 'no_such_filter'"), std::string::npos) << e.message();

  e = render_error("{% if x %}never closed");
  EXPECT_NE(e.message().find("missing {% endif %}"), std::string::npos) << e.message();
  e = render_error("\n\n{{ 'unterminated }}");
  EXPECT_NE(e.message().find("line 3"), std::string::npos) << e.message();
  e = render_error("{% frobnicate %}");
  EXPECT_NE(e.message().find("unknown tag 'frobnicate'"), std::string::npos) << e.message();
  e = render_error("{{ (1 + }}");
  EXPECT_NE(e.message().find("line 1"), std::string::npos) << e.message();
}

TEST(textJinjaTemplate, EvaluationErrorsNameLineAndConstruct) {
  Error e = render_error("a\nb\n  {{ 'x' + 1 }}");
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("line 3, column"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("operator '+'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("can only concatenate str"), std::string::npos) << e.message();

  e = render_error("\n{% for x in none %}{% endfor %}");
  EXPECT_NE(e.message().find("line 2"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("for loop: 'NoneType' object is not iterable"), std::string::npos) << e.message();

  e = render_error("{{ missing.attr }}");
  EXPECT_NE(e.message().find("'missing' is undefined"), std::string::npos) << e.message();
  e = render_error("{{ nothing|tojson }}");
  EXPECT_NE(e.message().find("filter 'tojson'"), std::string::npos) << e.message();
  e = render_error("{% set n = 1 %}{% set n.a = 2 %}");
  EXPECT_NE(e.message().find("non-namespace"), std::string::npos) << e.message();
  // Endless recursion is an error, not a crash.
  e = render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  EXPECT_NE(e.message().find("recursion"), std::string::npos) << e.message();
}

TEST(textJinjaTemplate, PythonFormattingOfValues) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1), "0.1");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(to_repr(Value("a'b")), "\"a'b\"");
  EXPECT_EQ(to_repr(Value("a'b\"\n")), "'a\\'b\"\\n'");
  EXPECT_EQ(to_str(Value::tuple({Value(1)})), "(1,)");
}

}  // namespace
}  // namespace tessera::text::jinja
