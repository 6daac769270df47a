"""Tool calls (OpenAI function calling) end to end, through the official `openai` client.

The served models are scripted (scripted_model.py): their greedy answer to
any prompt is a tool call in the markup of a tool-using model (InternLM2's
<|action_start|><|plugin|> ... <|action_end|>, Qwen2.5's <tool_call> ...
</tool_call>). The engine, template, detokenizer and server that turn the
answer into `tool_calls` are the real ones.
"""

import json

import openai
import pytest
import requests

from scripted_model import scripted_model, serve_scripted
from test_server_helpers import Server

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}},
]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]

# The scripted answers, one piece a token; (piece, special).
INTERNLM_ANSWER = [("I will look that up.", False), ("<|action_start|>", True), ("<|plugin|>", True),
                   ('\n{"name": "get_weather", ', False), ('"parameters": {"city": "Paris"}}', False),
                   ("<|action_end|>", True), ("<|im_end|>", True)]
INTERNLM_OTHERS = [("<|im_start|>", True)]
QWEN_ANSWER = [("Let me check.", False), ("<tool_call>", False), ('\n{"name": "get_weather", "arguments": ', False),
               ('{"city": "Paris"}}\n', False), ("</tool_call>", False), ("<|im_end|>", True)]
QWEN_OTHERS = [("<|im_start|>", True)]


@pytest.fixture(scope="module")
def internlm_server(tessera_bin, testdata, tmp_path_factory):
    """The InternLM2.5 chat model's own template, which does not render tools, as the chat template."""
    yield from serve_scripted(tessera_bin, tmp_path_factory.mktemp("tools_internlm"), INTERNLM_ANSWER,
                              INTERNLM_OTHERS, testdata / "chat_templates" / "internlm-internlm2_5-7b-chat.jinja")


@pytest.fixture(scope="module")
def qwen_server(tessera_bin, testdata, tmp_path_factory):
    """Qwen2.5's own template, which renders tools."""
    yield from serve_scripted(tessera_bin, tmp_path_factory.mktemp("tools_qwen"), QWEN_ANSWER, QWEN_OTHERS,
                              testdata / "chat_templates" / "Qwen-Qwen2.5-7B-Instruct.jinja")


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=60, max_retries=0)


def chat(server, **kwargs):
    return client(server).chat.completions.create(model="demo", temperature=0, max_tokens=20, **kwargs)


def streamed(server, **kwargs):
    """(content, {index: {"id", "name", "arguments"}}, finish_reason) put together from the chunks."""
    content, calls, finish = "", {}, None
    for chunk in client(server).chat.completions.create(model="demo", temperature=0, max_tokens=20, stream=True,
                                                          **kwargs):
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += call.id or ""
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    return content, calls, finish


def test_the_log_says_how_tools_are_served(internlm_server, qwen_server):
    assert "answers are read in internlm markup (from the vocabulary" in internlm_server.read_log()
    assert "rendered by the built-in 'internlm2' template" in internlm_server.read_log()
    assert "answers are read in qwen markup" in qwen_server.read_log()
    assert "requests with tools are rendered by the chat template" in qwen_server.read_log()


def test_internlm_call_becomes_tool_calls(internlm_server):
    r = chat(internlm_server, messages=WEATHER, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "I will look that up."
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_internlm_streamed_call_equals_the_whole_answer(internlm_server):
    content, calls, finish = streamed(internlm_server, messages=WEATHER, tools=TOOLS)
    assert finish == "tool_calls"
    assert content == "I will look that up."
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_without_tools_the_answer_stays_text(internlm_server):
    for extra in ({}, {"tools": TOOLS, "tool_choice": "none"}):
        r = chat(internlm_server, messages=WEATHER, **extra)
        choice = r.choices[0]
        assert choice.finish_reason == "stop"
        assert not choice.message.tool_calls
        # The special tokens are skipped as usual; the rest of the markup is text.
        assert choice.message.content == 'I will look that up.\n{"name": "get_weather", "parameters": {"city": "Paris"}}'


def test_tools_reach_the_prompt_only_when_used(internlm_server):
    def prompt_tokens(**extra):
        return chat(internlm_server, messages=WEATHER, **extra).usage.prompt_tokens

    plain = prompt_tokens()
    assert prompt_tokens(tools=TOOLS, tool_choice="none") == plain
    both = prompt_tokens(tools=TOOLS)
    one = prompt_tokens(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "search"}})
    assert plain < one < both


def test_a_conversation_with_a_call_and_its_result_goes_on(internlm_server):
    r = chat(internlm_server, tools=TOOLS, messages=WEATHER + [
        {"role": "assistant", "content": "I will look that up.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear", "celsius": 21}'},
    ])
    assert r.choices[0].finish_reason == "tool_calls"


def test_qwen_call_through_its_own_template(qwen_server):
    r = chat(qwen_server, messages=WEATHER, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check."
    assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Paris"}
    content, calls, finish = streamed(qwen_server, messages=WEATHER, tools=TOOLS)
    assert (content, finish) == ("Let me check.", "tool_calls")
    assert calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_mistral_call_and_its_round_trip_through_the_template(tessera_bin, testdata, tmp_path):
    # Mistral v3 tokenizers have [TOOL_CALLS] as a control token; the answer ends with eos.
    pieces = [("I will check.", False), ("[TOOL_CALLS]", True),
              ('[{"name": "get_weather", "arguments": {"city": "Paris"}}]', False), ("</s>", True)]
    template = (testdata / "chat_templates" / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text()
    model = scripted_model(tessera_bin, tmp_path, pieces, [], chat_template=template)
    s = Server(tessera_bin, model, tmp_path / "server.log")
    try:
        assert "answers are read in mistral markup" in s.read_log()
        message = chat(s, messages=WEATHER, tools=TOOLS).choices[0].message
        assert message.content == "I will check."
        call = message.tool_calls[0]
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
        # The template takes only nine-letter ids: the one given must go back in as it is.
        assert len(call.id) == 9 and call.id.isalnum()
        r = chat(s, tools=TOOLS, messages=WEATHER + [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
        assert r.choices[0].finish_reason == "tool_calls"
    finally:
        assert s.stop() == 0


def test_llama3_bare_json_call_through_its_own_template(tessera_bin, testdata, tmp_path):
    pieces = [('{"name": "get_weather", ', False), ('"parameters": {"city": "Paris"}}', False), ("<|eot_id|>", True)]
    others = [(t, True) for t in ("<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>", "<|eom_id|>")]
    template = (testdata / "chat_templates" / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()
    model = scripted_model(tessera_bin, tmp_path, pieces, others, chat_template=template)
    s = Server(tessera_bin, model, tmp_path / "server.log")
    try:
        assert "answers are read in llama3 markup" in s.read_log()
        choice = chat(s, messages=WEATHER, tools=TOOLS).choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Paris"}
        # Streamed, the bare JSON is held from its first brace: no content goes out.
        content, calls, finish = streamed(s, messages=WEATHER, tools=TOOLS)
        assert (content, finish, calls[0]["name"]) == ("", "tool_calls", "get_weather")
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("body, param, words", [
    ({"tool_choice": "required"}, "tool_choice", "needs 'tools'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "'nope'"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "must be"),
    ({"tools": [{"type": "function"}]}, "tools[0].function", "required"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name", "non-empty"),
    ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type", "function"),
    ({"tools": {"name": "f"}}, "tools", "list"),
])
def test_bad_tool_fields_get_clear_errors(internlm_server, body, param, words):
    r = requests.post(internlm_server.url + "/v1/chat/completions", timeout=30,
                      json={"model": "demo", "messages": WEATHER, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_a_template_that_drops_tools_is_refused_with_the_fix(tessera_bin, tmp_path):
    # Qwen markup, but the plain ChatML template, which never reads `tools`.
    model = scripted_model(tessera_bin, tmp_path, QWEN_ANSWER, QWEN_OTHERS)
    s = Server(tessera_bin, model, tmp_path / "server.log", "--chat-template", "chatml")
    try:
        r = requests.post(s.url + "/v1/chat/completions", timeout=30,
                          json={"model": "demo", "messages": WEATHER, "tools": TOOLS})
        assert r.status_code == 400
        assert "--chat-template" in r.json()["error"]["message"]
        assert "requests with tools are refused" in s.read_log()
        # Without tools it serves as ever.
        assert requests.post(s.url + "/v1/chat/completions", timeout=30,
                             json={"model": "demo", "messages": WEATHER, "max_tokens": 4}).status_code == 200
    finally:
        assert s.stop() == 0
