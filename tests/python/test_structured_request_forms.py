"""The other engines' ways of asking for a structured answer, end to end:
LMDeploy's response_format regex_schema and vLLM's structured_outputs (which
replaced its guided_* fields), compact JSON included.

References: Python's re (whole matches), json and jsonschema. The demo
model's random weights write nonsense, which without the constraint matches
none of these.
"""

import json
import re

import jsonschema
import pytest
import requests

from test_server_helpers import Server, make_demo_model, serving

ORDER = {
    "type": "object",
    "properties": {
        "item": {"type": "string", "maxLength": 6},
        "count": {"type": "integer", "minimum": 1, "maximum": 99},
        "notes": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
    },
    "required": ["item", "count", "notes"],
}
ANSWER = r"(yes|no), \d{1,3} (apples|pears)\."


@pytest.fixture(scope="module")
def demo_server(tessera_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("request_forms")
    yield from serving(Server(tessera_bin, make_demo_model(tessera_bin, root / "demo"), root / "server.log"))


def chat(server, **body):
    """The first choice's text and finish reason of a chat request."""
    reply = requests.post(server.url + "/v1/chat/completions", timeout=120, json={
        "model": "demo", "messages": [{"role": "user", "content": "An answer, please."}], **body})
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    return choice["message"]["content"], choice["finish_reason"]


def whitespace_between_tokens(text):
    """Whitespace bytes of a JSON text outside its strings."""
    count, in_string, escaped = 0, False, False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in " \t\r\n":
            count += 1
    return count


def test_lmdeploys_regex_schema_is_matched_whole(demo_server):
    plain, _ = chat(demo_server, max_tokens=20, temperature=1.0, seed=1)
    assert re.fullmatch(ANSWER, plain) is None
    seen = set()
    for seed in range(5):
        text, finish = chat(demo_server, max_tokens=40, temperature=1.0, seed=seed,
                            response_format={"type": "regex_schema", "regex_schema": ANSWER})
        assert re.fullmatch(ANSWER, text) and finish == "stop", text
        seen.add(text)
    assert len(seen) >= 2  # sampled, not one fixed answer


def test_vllms_structured_outputs_json_regex_choice_and_json_object(demo_server):
    for schema in (ORDER, json.dumps(ORDER)):  # the schema, or its text
        text, finish = chat(demo_server, max_tokens=300, temperature=1.0, seed=3,
                            structured_outputs={"json": schema})
        assert finish == "stop", text
        jsonschema.validate(json.loads(text), ORDER)
    text, finish = chat(demo_server, max_tokens=40, temperature=1.0, seed=4, structured_outputs={"regex": ANSWER})
    assert re.fullmatch(ANSWER, text) and finish == "stop", text
    choices = ["red", "green", "a shade of blue"]
    seen = set()
    for seed in range(6):
        text, _ = chat(demo_server, max_tokens=20, temperature=1.0, seed=seed, structured_outputs={"choice": choices})
        assert text in choices, text
        seen.add(text)
    assert len(seen) >= 2
    stopped = 0
    for seed in range(4):
        text, finish = chat(demo_server, max_tokens=300, temperature=1.0, seed=seed,
                            structured_outputs={"json_object": True, "disable_fallback": True})
        if finish == "stop":
            stopped += 1
            assert isinstance(json.loads(text), dict), text
    assert stopped >= 2


def test_disable_any_whitespace_writes_the_json_compactly(demo_server):
    # The space token pushed up, so that where whitespace is allowed the model writes it.
    vocab = json.loads((demo_server.model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    bias = {str(vocab["\u2581"]): 4}
    spaced = compact = 0
    for seed in range(4):
        for disable in (False, True):
            text, finish = chat(demo_server, max_tokens=300, temperature=1.0, seed=seed, logit_bias=bias,
                                structured_outputs={"json": ORDER, "disable_any_whitespace": disable})
            assert finish == "stop", text
            jsonschema.validate(json.loads(text), ORDER)
            if disable:
                assert whitespace_between_tokens(text) == 0, text
                compact += 1
            else:
                spaced += whitespace_between_tokens(text) > 0
    assert compact == 4
    assert spaced >= 2, "the check above would pass without the flag"


@pytest.mark.parametrize("extra, param, words", [
    ({"response_format": {"type": "regex_schema"}}, "response_format.regex_schema", "must be the regular expression"),
    ({"response_format": {"type": "regex_schema", "regex_schema": "(?<=a)b"}}, "response_format.regex_schema",
     "lookaround assertions are not supported at offset 0"),
    ({"response_format": {"type": "xml"}}, "response_format.type", '"regex_schema", not "xml"'),
    ({"structured_outputs": "json"}, "structured_outputs", "must be an object"),
    ({"structured_outputs": {}}, "structured_outputs", "names no structure"),
    ({"structured_outputs": {"grammar": "root ::= x"}}, "structured_outputs.grammar", "not supported"),
    ({"structured_outputs": {"whitespace_pattern": " ?"}}, "structured_outputs.whitespace_pattern", "not supported"),
    ({"structured_outputs": {"jason": {}}}, "structured_outputs.jason", "not a field of structured_outputs"),
    ({"structured_outputs": {"regex": "a+", "choice": ["a"]}}, "structured_outputs.choice", "give one of"),
    ({"structured_outputs": {"json_object": True, "regex": "a"}}, "structured_outputs.json_object", "give one of"),
    ({"structured_outputs": {"json": {"type": "string"}, "disable_any_whitespace": "yes"}},
     "structured_outputs.disable_any_whitespace", "must be a boolean"),
    ({"structured_outputs": {"regex": 7}}, "structured_outputs.regex", "must be a string"),
    ({"structured_outputs": {"json": {"type": "object", "not": {"required": ["a"]}}}}, "structured_outputs.json",
     "'not' is not supported"),
    ({"structured_outputs": {"json": {"type": "number", "multipleOf": 0.01}}}, "structured_outputs.json",
     "multipleOf 0.01 is not supported"),
    ({"structured_outputs": {"choice": ["a"]}, "guided_regex": "b"}, "structured_outputs", "give one of"),
    ({"structured_outputs": {"choice": ["a"]}, "response_format": {"type": "json_object"}}, "structured_outputs",
     "give one of"),
])
def test_bad_requests_get_clear_errors(demo_server, extra, param, words):
    reply = requests.post(demo_server.url + "/v1/chat/completions", timeout=60, json={
        "model": "demo", "messages": [{"role": "user", "content": "hi"}], **extra})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param, error
    assert words in error["message"], error["message"]
