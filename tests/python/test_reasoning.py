"""--reasoning-parser end to end, through the official `openai` client: a scripted model
(scripted_model.py) thinks, closes </think> and answers; the server splits the thinking into
reasoning_content, whole or streamed, and with tools reads calls from the answer after it."""

import json

import openai
import pytest

from scripted_model import scripted_model
from test_server_helpers import Server

QUESTION = [{"role": "user", "content": "What is two and two?"}]
CHATML = [("<|im_start|>", True)]


def answer(think_special):
    return [("Two and two", False), (" make four.", False), ("</think>", think_special), ("It is 4.", False),
            ("<|im_end|>", True)]


@pytest.fixture(scope="module", params=[False, True], ids=["think_tags_plain", "think_tags_special"])
def server(request, tessera_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("reasoning")
    model = scripted_model(tessera_bin, root, answer(request.param), CHATML + [("<think>", request.param)])
    s = Server(tessera_bin, model, root / "server.log", "--chat-template", "chatml", "--reasoning-parser",
               "deepseek-r1")
    yield s
    assert s.stop() == 0, s.read_log()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=60, max_retries=0)


def extra(model, name):
    """A field the openai client's types do not declare."""
    value = getattr(model, name, None)
    return value if value is not None else (model.model_extra or {}).get(name)


def test_thinking_goes_to_reasoning_content(server):
    r = client(server).chat.completions.create(model="demo", messages=QUESTION, temperature=0, max_tokens=20)
    message = r.choices[0].message
    assert extra(message, "reasoning_content") == "Two and two make four."
    assert message.content == "It is 4."
    assert r.choices[0].finish_reason == "stop"


def test_streamed_thinking_equals_the_whole_answer(server):
    reasoning, content = "", ""
    for chunk in client(server).chat.completions.create(model="demo", messages=QUESTION, temperature=0,
                                                          max_tokens=20, stream=True):
        for choice in chunk.choices:
            reasoning += extra(choice.delta, "reasoning_content") or ""
            content += choice.delta.content or ""
    assert (reasoning, content) == ("Two and two make four.", "It is 4.")


def test_cut_short_while_thinking_is_all_reasoning(server):
    r = client(server).chat.completions.create(model="demo", messages=QUESTION, temperature=0, max_tokens=2)
    message = r.choices[0].message
    assert extra(message, "reasoning_content") == "Two and two make four."
    assert message.content is None
    assert r.choices[0].finish_reason == "length"


def test_completions_are_not_split(server):
    r = client(server).completions.create(model="demo", prompt="Q", temperature=0, max_tokens=4)
    assert r.choices[0].text.startswith("Two and two make four.")


def test_without_the_parser_the_tags_are_text(tessera_bin, tmp_path):
    model = scripted_model(tessera_bin, tmp_path, answer(False), CHATML)
    s = Server(tessera_bin, model, tmp_path / "server.log", "--chat-template", "chatml")
    try:
        r = client(s).chat.completions.create(model="demo", messages=QUESTION, temperature=0, max_tokens=20)
        assert r.choices[0].message.content == "Two and two make four.</think>It is 4."
        assert extra(r.choices[0].message, "reasoning_content") is None
    finally:
        assert s.stop() == 0


def test_reasoning_then_a_tool_call(tessera_bin, testdata, tmp_path):
    pieces = [("I need the weather.", False), ("</think>", False), ("<tool_call>", False),
              ('{"name": "get_weather", "arguments": {"city": "Paris"}}', False), ("</tool_call>", False),
              ("<|im_end|>", True)]
    template = (testdata / "chat_templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    model = scripted_model(tessera_bin, tmp_path, pieces, CHATML, chat_template=template)
    s = Server(tessera_bin, model, tmp_path / "server.log", "--reasoning-parser", "qwen-qwq")
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    try:
        r = client(s).chat.completions.create(model="demo", messages=QUESTION, temperature=0, max_tokens=20,
                                              tools=tools)
        message = r.choices[0].message
        assert extra(message, "reasoning_content") == "I need the weather."
        assert message.content is None
        assert r.choices[0].finish_reason == "tool_calls"
        assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris"}
        calls, reasoning = {}, ""
        for chunk in client(s).chat.completions.create(model="demo", messages=QUESTION, temperature=0,
                                                         max_tokens=20, tools=tools, stream=True):
            for choice in chunk.choices:
                reasoning += extra(choice.delta, "reasoning_content") or ""
                assert not choice.delta.content
                for call in choice.delta.tool_calls or []:
                    calls[call.index] = call.function.name
        assert (reasoning, calls) == ("I need the weather.", {0: "get_weather"})
    finally:
        assert s.stop() == 0
