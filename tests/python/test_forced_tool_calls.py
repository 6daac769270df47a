"""tool_choice "required" and a named function: the answer is made a call.

The served models are scripted (scripted_model.py) to answer in plain text,
never a call; with a call forced, the answer must come back as `tool_calls`
whose name is one of the tools (the named one) and whose arguments validate
against that tool's parameters (jsonschema is the reference). Qwen's markers
are ordinary added tokens, InternLM2's special tokens (which the constraint
offers beside their spelling in ordinary tokens; grammar_vocabulary_test.cc
checks that it does).
"""

import json

import jsonschema
import openai
import pytest
import requests

from scripted_model import serve_scripted

# Bounded strings: greedy over the scripted model's flat logits (outside its
# answer) takes the lowest id allowed, which inside an unbounded string is a
# space forever.
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 5},
                                                        "limit": {"type": "integer"}},
                       "required": ["query", "limit"]}}},
]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def qwen_server(tessera_bin, testdata, tmp_path_factory):
    yield from serve_scripted(tessera_bin, tmp_path_factory.mktemp("forced_qwen"),
                     [("It is sunny in Paris.", False), ("<|im_end|>", True)],
                     [("<|im_start|>", True), ("<tool_call>", False), ("</tool_call>", False)],
                     testdata / "chat_templates" / "Qwen-Qwen2.5-7B-Instruct.jinja")


@pytest.fixture(scope="module")
def internlm_server(tessera_bin, testdata, tmp_path_factory):
    yield from serve_scripted(tessera_bin, tmp_path_factory.mktemp("forced_internlm"),
                     [("It is sunny in Paris.", False), ("<|im_end|>", True)],
                     [("<|im_start|>", True), ("<|action_start|>", True), ("<|plugin|>", True),
                      ("<|action_end|>", True)],
                     testdata / "chat_templates" / "internlm-internlm2_5-7b-chat.jinja")


def chat(server, **kwargs):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    return client.chat.completions.create(model="demo", temperature=0, max_tokens=1000, messages=WEATHER,
                                          tools=TOOLS, **kwargs).choices[0]


def assert_valid_call(choice, name=None):
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name in PARAMETERS
    if name:
        assert call.function.name == name
    jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])


@pytest.mark.parametrize("server_name", ["qwen_server", "internlm_server"])
def test_a_forced_call_is_a_valid_call_where_the_model_would_answer_in_text(server_name, request):
    server = request.getfixturevalue(server_name)
    free = chat(server, tool_choice="auto")
    assert free.finish_reason == "stop" and free.message.content == "It is sunny in Paris."
    assert not free.message.tool_calls
    assert_valid_call(chat(server, tool_choice="required"))
    assert_valid_call(chat(server, tool_choice={"type": "function", "function": {"name": "search"}}), "search")


def test_a_forced_call_streams_as_a_call(qwen_server):
    client = openai.OpenAI(base_url=qwen_server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    name, arguments, finish = "", "", None
    for chunk in client.chat.completions.create(model="demo", temperature=0, max_tokens=1000, messages=WEATHER,
                                                tools=TOOLS, tool_choice="required", stream=True):
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                name += call.function.name or ""
                arguments += call.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    jsonschema.validate(json.loads(arguments), PARAMETERS[name])


def test_a_call_cannot_be_forced_together_with_a_response_format(qwen_server):
    reply = requests.post(qwen_server.url + "/v1/chat/completions", timeout=60, json={
        "model": "demo", "messages": WEATHER, "tools": TOOLS, "tool_choice": "required",
        "response_format": {"type": "json_object"}})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "response_format"
