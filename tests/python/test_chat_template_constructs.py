"""tessera's Jinja interpreter against jinja2, construct by construct.

Each snippet below exercises one part of the language (operators, Python
formatting of values, filters, tests, methods, loops and their scoping,
macros, whitespace control, errors) and is rendered by jinja2, configured as
transformers configures it, and by the `tessera_chat_template` program; the
results must agree exactly, and where jinja2 fails tessera must fail too.
"""

import pytest

from test_chat_templates import chat_tool, mismatches, render_reference, render_tessera  # noqa: F401

jinja2 = pytest.importorskip("jinja2")

CONTEXT = {
    "d": {"b": 1, "a": [1, 2.5, "x"], "items": {"type": "string"}, "n": None},
    "s": "  Hello World  ",
    "l": [3, 1, 2],
    "f": 2.5,
    "t": True,
    "u": "ünïcödé 日本",
    "big": 12345678901234567,
    "floats": [0.1, 1e16, 1e-5, 123456789.125, -0.0, 3.0],
}

SNIPPETS = [
    # arithmetic and Python's formatting of numbers
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}",
    "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 3.0 * 2 }} {{ 10 / 4 }} {{ floats }} {{ big }} {{ big + 1 }}",
    "{{ f + 1 }} {{ t + 1 }} {{ -f }} {{ +t }} {{ 1 - 0.9 }}",
    # concatenation and repetition
    "{{ 'a' ~ 1 ~ none ~ true ~ f ~ undefined_name }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 2 }} {{ 'x' * 0 }}|",
    "{{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ l + l }}",
    # str() and repr() of containers and strings
    "{{ [1, 'a', none, true, 2.5, {'k': 'v'}, [false]] }} {{ {'a': none, 'b': [true, false]} }} {{ d }}",
    "{{ [\"it's\", 'q\"', 'back\\\\slash', 'ü\\n', 'both \\' \"', '\\t'] }}",
    "{{ \"it's\" }} {{ 'say \"hi\"' }} {{ 'tab\\tnew\\nline' }} {{ '\\u00e9\\x41\\101' }} {{ 'a' 'b' }} {{ 'keep \\d' }}",
    "{{ none }} {{ true }} {{ false }} {{ undefined_name }}|{{ [undefined_name|default(1)] }}",
    # string methods
    "{{ s|trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ s|trim('H ') }}",
    "{{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ ' a  b '.split(none, 1) }} {{ u.split() }}",
    "{{ 'hello wORLD'.title() }} {{ 'hello'.upper() }} {{ 'HeLLo'.lower() }} {{ 'hello wORLD'|title }} {{ 'hELLO'|capitalize }} {{ 'hello'.capitalize() }}",
    "{{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.startswith('abcd') }} {{ u.endswith('本') }}",
    "{{ 'a-b-c'.replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'a-b-c'.replace('-', '', 1) }} {{ 42|replace('4', 'x') }}",
    "{{ '{} and {}'.format(1, 'x') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='hi') }} {{ '{{}}{}'.format(none) }}",
    "{{ ', '.join(['a', 'b']) }} {{ 'banana'.count('an') }} {{ 'banana'.find('n') }} {{ u.find('日') }} {{ 'x\\ny\\n'.splitlines() }}",
    "{{ '12'.isdigit() }} {{ 'a1'.isdigit() }} {{ ' '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }}",
    # filters
    "{{ l|length }} {{ l|count }} {{ u|length }} {{ d|length }} {{ l|first }} {{ l|last }} {{ 'xyz'|first }} {{ []|first }}|",
    "{{ l|sort }} {{ l|sort(reverse=true) }} {{ ['b', 'A', 'a']|sort }} {{ l|list }} {{ l|join('-') }} {{ l|join }} {{ l|sum }} {{ l|min }} {{ l|max }}",
    "{{ 'abc'|list }} {{ 'abc'|reverse }} {{ l|reverse|list }} {{ d|list }} {{ d|items|list }}",
    "{{ [1, 2, 3]|map('string')|join(',') }} {{ ['a', 'b']|map('upper')|list }} {{ [{'a': 1}, {}]|map(attribute='a', default=0)|list }}",
    "{{ [1, 0, 2]|select|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('even')|list }} {{ [1, 5, 9]|select('gt', 4)|list }}",
    "{{ ['A', 'a', 'b', 'B', 'c']|unique|list }} {{ ['A', 'a']|unique(case_sensitive=true)|list }} {{ [1, 1.0, true, 2]|unique|list }}",
    "{{ 'x\\ny\\n\\nz'|indent(2) }}|{{ 'x\\ny'|indent(4, first=true) }}|{{ 'x\\n\\ny'|indent(2, blank=true) }}|{{ 'a\\nb'|indent('> ') }}",
    "{{ 42|string }} {{ '42'|int + 1 }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '3.5'|float }} {{ 3.7|int }} {{ '3.7'|int }} {{ -3|abs }} {{ -2.5|abs }}",
    "{{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(method='ceil') }} {{ 2.9|round(0, 'floor') }}",
    "{{ undefined_name|default('dflt') }} {{ ''|default('e', true) }} {{ none|default('n') }} {{ 0|d('zero', boolean=true) }}",
    "{{ '<a href=\"x\">&\\'</a>'|e }} {{ 'x'|safe }} {{ 'a b'|upper }} {{ 'A B'|lower }} {{ d|attr('b') }}",
    "{{ d|tojson }} {{ d|tojson(indent=2) }} {{ 'é\\n\"'|tojson }} {{ [1.0, 2, none, true, 1e16, 0.5]|tojson }} {{ {}|tojson }} {{ []|tojson(indent=4) }}",
    "{{ d|tojson(indent=4) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ u|tojson(ensure_ascii=true) }}",
    "{{ messages|map(attribute='role')|list }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='content')|join }}",
    "{{ messages|selectattr('name')|list }} {{ messages|selectattr('name', 'defined')|list }} {{ messages|map(attribute='content')|map('length')|list }}",
    # tests
    "{% if none is none and t is true and not false %}ok{% endif %} {{ 1 is number }} {{ t is number }} {{ 'a' is string }} {{ d is mapping }} {{ l is mapping }}",
    "{{ l is iterable }} {{ 1 is iterable }} {{ 'x' is iterable }} {{ undefined_name is iterable }} {{ undefined_name is defined }} {{ undefined_name is undefined }} {{ d.zz is defined }}",
    "{{ l is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 1 is integer }} {{ t is integer }} {{ 1.0 is float }} {{ t is boolean }} {{ 0 is false }}",
    "{{ 'x' is equalto 'x' }} {{ 'x' is eq 'y' }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 'a' is in 'abc' }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ none is sameas none }}",
    "{{ 1 is not none }} {{ undefined_name is not defined }} {{ not 1 is none }} {{ (none is none) is true }}",
    # membership and comparison
    "{{ 'a' in 'abc' }} {{ 1 in l }} {{ 'b' in d }} {{ 'zz' not in d }} {{ 5 not in l }} {{ 1.0 in l }} {{ 'x' in undefined_name }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ 'é' > 'z' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ none == none }}",
    "{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ [1, [2]] == [1, [2]] }} {{ 'a' == 1 }} {{ undefined_name == undefined_other }} {{ 1 != 2 }} {{ 2 >= 2.0 }}",
    # logic and conditional expressions
    "{{ 'yes' if t else 'no' }} {{ 'yes' if none }}|{{ t and 'A' or 'B' }} {{ none or 'fallback' }} {{ 0 and 1 }} {{ [] or {} }} {{ 'x' if 0 else 'y' if 1 else 'z' }}",
    # access and slicing
    "{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[5:] }} {{ l[10] }}|{{ l[-10:-5] }}",
    "{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ u[1] }} {{ u[-2:] }} {{ u[::-1] }} {{ u[2:100] }} {{ 'abcdef'[4:1:-1] }} {{ 'abc'[-5:] }}",
    "{{ d.b }} {{ d['b'] }} {{ d.missing }}|{{ d['missing'] }}|{{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.a.1 }} {{ d.n }}",
    "{{ none.attr }}|{{ d.b.c }}|{{ 'str'.nope }}|{{ l.nope }}|{{ none['x'] }}|{{ 5[0] }}|",
    "{{ d.items is defined }} {{ d['items'] is mapping }} {{ d.items is mapping }} {{ d.keys()|list }} {{ d.values()|list|length }}",
    # loops
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}{{ loop.last }}{{ loop.length }}{% else %}none{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %} {% for c in 'ab' %}{{ c }}{% endfor %} {% for k in d %}{{ k }},{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for a, b in [(1, 2), [3, 4]] %}{{ a }}{{ b }}{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in l %}{% for y in 'ab' %}{{ loop.index }}{{ y }}{% endfor %}{{ loop.index }} {% endfor %}",
    "{% for x in undefined_name %}never{% endfor %}done",
    # scoping
    "{% set x = 1 %}{% for i in l %}{% set x = x + i %}{{ x }}{% endfor %} {{ x }}",
    "{% set ns = namespace(x=0, items=[]) %}{% for i in l %}{% set ns.x = ns.x + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.x }} {{ ns.items }}",
    "{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }} {{ ns.b }}|{% if true %}{% set leak = 'yes' %}{% endif %}{{ leak }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set c = 3, 4 %}{{ c }}",
    # macros
    "{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}{{ m() }}",
    "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}",
    "{% macro later() %}{{ helper() }}{% endmacro %}{% macro helper() %}H{{ outer }}{% endmacro %}{% set outer = '!' %}{{ later() }}",
    "{%- macro m(x) -%}\n  {{- x|upper -}}\n{%- endmacro -%}\n{{ m('a') ~ m('b') }}",
    # block set, with, filter blocks, raw
    "{% set b %}inner {{ 1 + 1 }}{% endset %}[{{ b }}] {% set up | upper | trim %}  x {% endset %}[{{ up }}]",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}| {% filter upper %}hello {{ 'x' }}{% endfilter %}",
    "{% raw %}{{ not evaluated }}{% if %}{% endraw %}after",
    # whitespace control, trim_blocks, lstrip_blocks
    "a  {%- if true %}  b  {% endif -%}  c",
    "line1\n    {% if true %}\n    inner\n    {% endif %}\nline2\n",
    "  {# comment #}\nx  {#- strip -#}  y\n",
    "   {%+ if true %}kept{% endif %}\n   {% if true %}x{% endif +%}\nend",
    "{{ 'a' }}\n{{ 'b' }}\n\n",
    "x {{- ' y ' -}} z {{ 'w' }}  \t{% if true -%}\n\n  v{%- endif %}",
    "a\r\nb\rc\n{% for i in l %}\n  - {{ i }}\n{% endfor %}\n",
    "{% if true %}  \n{% endif %}|  {% if true %}t{% endif %}|\t{%- if true %}u{% endif %}",
    # globals
    "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}",
    "{{ raise_exception is defined }} {{ strftime_now('%Y-%m-%d %H:%M %b %a %j') }}",
    # non-ASCII
    "{{ messages[0].content|tojson }} {{ u|upper }} {{ u|length }} {{ u.title() }} {{ u[:3] }}",
    # errors (jinja2 raises; tessera must too)
    "{{ x.y.z }}",
    "{{ 1 + 'a' }}",
    "{{ 'a' + 1 }}",
    "{{ foo() }}",
    "{% for x in 1 %}{% endfor %}",
    "{% for x in none %}{% endfor %}",
    "{{ l|no_such_filter }}",
    "{{ l is no_such_test }}",
    "{% if %}x{% endif %}",
    "{% if true %}x",
    "{% for x in l %}x{% endif %}",
    "{{ 1 / 0 }}",
    "{{ 1 // 0 }}",
    "{% set n = 1 %}{% set n.a = 1 %}",
    "{{ undefined_name + 1 }}",
    "{{ undefined_name.attr }}",
    "{{ undefined_name[0] }}",
    "{{ undefined_name|tojson }}",
    "{{ 'a' < 1 }}",
    "{{ l['x'] }}|{{ (l|length) < 'a' }}",
    "{{ raise_exception('custom message: ' ~ l|length) }}",
    "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
    "{{ 'abc'[::0] }}",
    "{{ d|items|first|first }} {{ l|items|list }}",
    "{{ 'x' in 1 }}",
    "{{ 1 in 'abc' }}",
    "{{ {'a': 1} }",
    "{{ 'unterminated }}",
    "{# unterminated comment",
    "{% endfor %}",
    "{% unknown_tag %}",
]

MESSAGES = [
    {"role": "system", "content": "Système: réponds en 日本語"},
    {"role": "user", "content": "Hi", "name": "ann"},
    {"role": "assistant", "content": "Hello!"},
]


@pytest.fixture(scope="module")
def results(chat_tool):
    requests = [{"template": snippet, "messages": MESSAGES, "add_generation_prompt": True,
                 "bos_token": "<s>", "eos_token": "</s>", "extra": CONTEXT, "now": "2024-07-26 10:30:00"}
                for snippet in SNIPPETS]
    return dict(zip(SNIPPETS, render_tessera(chat_tool, requests))), requests


# One snippet keeps an unknown escape ('\d') on purpose; jinja2 decodes string
# literals with Python's unicode-escape, which warns about it.
@pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")
@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_construct_matches_jinja2(results, index):
    ours, requests = results
    request = requests[index]
    reference = render_reference(request["template"], request)
    problems = mismatches(reference, ours[request["template"]])
    assert not problems, f"{request['template']!r}\n  jinja2: {reference}\n" + "\n".join(problems)
