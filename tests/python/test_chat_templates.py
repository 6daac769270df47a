"""tessera's chat templates against Python's jinja2.

Every real chat template in the shared test data (../shared/testdata/chat_templates)
and every built-in template is rendered for a set of conversations twice: by
jinja2, set up exactly as Hugging Face transformers sets it up for
apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loop controls, raise_exception, strftime_now, and its own tojson), and by
tessera through the `tessera_chat_template` test program. The texts must be
identical; where jinja2 raises, tessera must fail too (with the template's own
message when the template called raise_exception).

Skips when jinja2 is not installed, when the program is not built (set
TESSERA_CHAT_TEMPLATE to its path) or when the test data is absent (set
TESSERA_TESTDATA).
"""

import copy
import datetime
import json
import os
import subprocess
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")
from jinja2.ext import loopcontrols  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NOW = datetime.datetime(2024, 7, 26, 10, 30, 0)
BUILTINS = ["internlm2", "llama3", "llama2", "qwen", "chatml", "mistral", "vicuna", "base"]


class TemplateRaised(Exception):
    """raise_exception() was called by the template."""


def reference_environment():
    """jinja2 configured as transformers' _compile_jinja_template does it."""

    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_reference(source, request):
    """{"text": ...} or {"error": ..., "raised": bool} as jinja2 renders the request."""
    try:
        template = reference_environment().from_string(source)
        text = template.render(
            messages=copy.deepcopy(request["messages"]),
            tools=copy.deepcopy(request.get("tools")),
            add_generation_prompt=request["add_generation_prompt"],
            bos_token=request["bos_token"],
            eos_token=request["eos_token"],
            **request.get("extra", {}),
        )
        return {"text": text}
    except TemplateRaised as e:
        return {"error": str(e), "raised": True}
    except Exception as e:  # noqa: BLE001 - any jinja2 failure must be a tessera failure too
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def mismatches(reference, ours):
    """What is wrong with `ours` given jinja2's `reference`; empty when they agree."""
    if "text" in reference:
        if "text" not in ours:
            return [f"jinja2 rendered, tessera failed: {ours['error']}"]
        if ours["text"] != reference["text"]:
            a, b = reference["text"], ours["text"]
            at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            return [f"texts differ at character {at}: jinja2 {a[max(0, at - 40):at + 40]!r} "
                    f"tessera {b[max(0, at - 40):at + 40]!r}"]
        return []
    if "error" not in ours:
        return [f"jinja2 failed ({reference['error']}), tessera rendered {ours['text'][:200]!r}"]
    if reference.get("raised") and reference["error"] not in ours["error"]:
        return [f"template raised {reference['error']!r}, tessera said {ours['error']!r}"]
    return []


@pytest.fixture(scope="session")
def chat_tool():
    path = Path(os.environ.get("TESSERA_CHAT_TEMPLATE", REPO / "build" / "tests" / "tessera_chat_template"))
    if not path.is_absolute():
        path = REPO / path
    if not path.exists():
        pytest.skip(f"tessera_chat_template not built at {path} (cmake --build build --target tessera_chat_template)")
    return path


def render_tessera(tool, requests):
    result = subprocess.run([str(tool), "--batch"], input=json.dumps(requests).encode(),
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout.decode())


# ---- conversations ----

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days", "default": 1,
                         "minimum": 1, "maximum": 7},
                "threshold": {"type": "number", "description": "Rain threshold", "default": 0.5},
            },
            "required": ["city"],
        },
    }},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Filters"},
                "safe": {"type": "boolean", "description": "Safe search", "nullable": True},
            },
            "required": ["query", "tags"],
        },
    }},
]


def tool_conversation(arguments, assistant_content_key):
    call = {"role": "assistant"}
    if assistant_content_key:
        call["content"] = None
    call["tool_calls"] = [{"id": "call12345", "type": "function",
                           "function": {"name": "get_weather", "arguments": arguments}}]
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What's the weather in Paris?"},
        call,
        {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}", "tool_call_id": "call12345"},
        {"role": "assistant", "content": "It is 21 °C and clear in Paris."},
        {"role": "user", "content": "Thanks! And tomorrow?"},
    ]


CONVERSATIONS = {
    "system_user": {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello, who are you?"},
    ]},
    "user_only": {"messages": [{"role": "user", "content": "  Tell me a joke.  "}]},
    "multi_turn": {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?"},
    ]},
    "assistant_prefix": {"messages": [
        {"role": "user", "content": "Write a haiku about the sea."},
        {"role": "assistant", "content": "Waves fold into"},
    ]},
    "non_ascii": {"messages": [
        {"role": "system", "content": "你是一个乐于助人的助手。"},
        {"role": "user", "content": "Привет! Как дела? 😀 café «quote» 'single' \"double\""},
        {"role": "assistant", "content": "Ça va — très bien.\n\tMerci !"},
        {"role": "user", "content": "日本語で答えて\n"},
    ]},
    "content_parts": {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Describe this."},
                                     {"type": "text", "text": " Briefly."}]},
    ]},
    "tools_dict_arguments": {"messages": tool_conversation({"city": "Paris", "unit": "celsius"}, True),
                             "tools": TOOLS},
    "tools_string_arguments": {"messages": tool_conversation('{"city": "Paris"}', False), "tools": TOOLS},
    "tools_two_calls_two_results": {"messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call00002", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call00001"},
        {"role": "tool", "content": "rainy", "tool_call_id": "call00002"},
    ], "tools": TOOLS},
    "roles_not_alternating": {"messages": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ]},
    "tools_unused": {"messages": [{"role": "user", "content": "Hi there"}], "tools": TOOLS},
    "extra_variables": {"messages": [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hello"},
    ], "tools": TOOLS[:1], "extra": {"tools_in_user_message": False, "date_string": "01 Jan 2025"}},
    "empty": {"messages": []},
}


def requests_for(conversation):
    out = []
    for add_generation_prompt in (False, True):
        request = {"messages": conversation["messages"], "add_generation_prompt": add_generation_prompt,
                   "bos_token": "<s>", "eos_token": "</s>", "now": NOW.strftime("%Y-%m-%d %H:%M:%S")}
        if "tools" in conversation:
            request["tools"] = conversation["tools"]
        if "extra" in conversation:
            request["extra"] = conversation["extra"]
        out.append(request)
    return out


def real_templates():
    root = Path(os.environ.get("TESSERA_TESTDATA", REPO.parent / "shared" / "testdata")) / "chat_templates"
    return sorted(root.glob("*.jinja")) if root.exists() else []


def check(tool, source, conversation_name):
    requests = requests_for(CONVERSATIONS[conversation_name])
    ours = render_tessera(tool, [dict(r, template=source) for r in requests])
    problems = []
    for request, result in zip(requests, ours):
        for problem in mismatches(render_reference(source, request), result):
            problems.append(f"add_generation_prompt={request['add_generation_prompt']}: {problem}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("template", real_templates(), ids=lambda p: p.stem)
def test_real_template_matches_jinja2(chat_tool, template, conversation):
    check(chat_tool, template.read_text(encoding="utf-8"), conversation)


def test_real_templates_present(testdata):
    assert len(list((testdata / "chat_templates").glob("*.jinja"))) >= 10


def builtin_source(tool, name):
    result = subprocess.run([str(tool), "--print-builtin", name], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_template_matches_jinja2(chat_tool, name, conversation):
    check(chat_tool, builtin_source(chat_tool, name), conversation)


def test_builtin_internlm2_format(chat_tool):
    request = dict(requests_for(CONVERSATIONS["user_only"])[1], builtin="internlm2")
    text = render_tessera(chat_tool, [request])[0]["text"]
    assert text.startswith("<s><|im_start|>system\nYou are an AI assistant whose name is InternLM (书生·浦语).\n")
    assert text.endswith("<|im_end|>\n<|im_start|>user\n  Tell me a joke.  <|im_end|>\n<|im_start|>assistant\n")


def test_builtin_internlm2_tools_format(chat_tool):
    """InternLM2's agent layout as its model card documents it: the functions as a JSON list in a
    system message named <|plugin|>, a call between <|action_start|><|plugin|> and <|action_end|>,
    the result in an environment message named <|plugin|>."""
    request = dict(requests_for(CONVERSATIONS["tools_string_arguments"])[1], builtin="internlm2")
    text = render_tessera(chat_tool, [request])[0]["text"]
    functions = json.dumps([t["function"] for t in TOOLS], ensure_ascii=False)
    assert text.startswith("<s><|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                           "<|im_start|>system name=<|plugin|>\n" + functions + "<|im_end|>\n"
                           "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n")
    assert ("<|im_start|>assistant\n<|action_start|><|plugin|>\n"
            '{"name": "get_weather", "parameters": {"city": "Paris"}}<|action_end|><|im_end|>\n'
            '<|im_start|>environment name=<|plugin|>\n{"temperature": 21, "sky": "clear"}<|im_end|>\n') in text
    assert text.endswith("<|im_start|>user\nThanks! And tomorrow?<|im_end|>\n<|im_start|>assistant\n")


def test_a_wrong_render_is_caught(chat_tool, testdata):
    """The comparison must be able to fail: corrupt tessera's output and expect mismatches."""
    source = (testdata / "chat_templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    request = requests_for(CONVERSATIONS["multi_turn"])[1]
    reference = render_reference(source, request)
    ours = render_tessera(chat_tool, [dict(request, template=source)])[0]
    assert mismatches(reference, ours) == []
    assert mismatches(reference, {"text": ours["text"] + " "})
    assert mismatches(reference, {"text": ours["text"].replace("\n", "", 1)})
    assert mismatches(reference, {"error": "invalid_argument: boom"})
    # A real whitespace-rule mistake (no trim_blocks) changes the text and is caught.
    untrimmed = jinja2.Environment(trim_blocks=False, lstrip_blocks=False).from_string(
        "{% for m in messages %}\n{{ m.content }}\n{% endfor %}")
    wrong = {"text": untrimmed.render(messages=request["messages"])}
    ours = render_tessera(chat_tool, [dict(request, template="{% for m in messages %}\n{{ m.content }}\n{% endfor %}")])[0]
    assert mismatches({"text": ours["text"]}, wrong)
    # And where jinja2 raises, a tessera that renders is caught.
    assert mismatches({"error": "TemplateRaised", "raised": True}, {"text": "anything"})


def test_raise_exception_message_reaches_the_caller(chat_tool, testdata):
    source = (testdata / "chat_templates" / "google-gemma-2-2b-it.jinja").read_text(encoding="utf-8")
    request = dict(requests_for(CONVERSATIONS["system_user"])[1], template=source)
    ours = render_tessera(chat_tool, [request])[0]
    assert ours == {"error": "invalid_argument: System role not supported"}


def test_syntax_error_names_the_line(chat_tool):
    request = dict(requests_for(CONVERSATIONS["user_only"])[1],
                   template="{% for m in messages %}\n{{ m.content }}\n{% endif %}")
    error = render_tessera(chat_tool, [request])[0]["error"]
    assert "line 3" in error and "endif" in error
