"""Structured output (response_format json_object and json_schema) end to end.

The references are Python's json module and the jsonschema package: every
output that ends with finish_reason "stop" must parse, and validate against
its schema. The demo model's random weights write nonsense, which without the
constraint is never JSON; a scripted model (scripted_model.py) shows a
conforming answer passing through unchanged and a non-conforming one made to
conform.
"""

import datetime
import json
import re
from email.headerregistry import Address
from typing import Annotated

import jsonschema
import openai
import pydantic
import pytest
import requests
from pydantic.networks import IPvAnyInterface, IPvAnyNetwork

from scripted_model import scripted_model
from test_server_helpers import Server, make_demo_model, metric, serving

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "member": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    },
    "required": ["name", "age", "member", "tags"],
}
NESTED = {
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                        "required": ["x", "y"], "additionalProperties": False}},
    "type": "object",
    "properties": {
        "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 1, "maxItems": 2},
        "label": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]},
        "note": {"enum": ["a", "b", 1, None]},
    },
    "required": ["points", "note"],
}


def json_schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def demo_server(tessera_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("structured")
    yield from serving(Server(tessera_bin, make_demo_model(tessera_bin, root / "demo"), root / "server.log"))


def demo_vocab(server):
    return json.loads((server.model_dir / "tokenizer.json").read_text())["model"]["vocab"]


def complete(server, **body):
    reply = requests.post(server.url + "/v1/completions", timeout=120,
                          json={"model": "demo", "prompt": "Once upon a time", **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def finished_values(server, schema, bias, max_tokens=500):
    """The parsed answers that ended with the value (finish_reason "stop") of
    two choices at each of four seeds under `schema`, sampled with `bias`."""
    values = []
    for seed in range(4):
        body = complete(server, max_tokens=max_tokens, temperature=1.0, seed=seed, n=2, logit_bias=bias,
                        response_format=json_schema_format(schema))
        values += [json.loads(c["text"]) for c in body["choices"] if c["finish_reason"] == "stop"]
    return values


def keys_in_schema_order(value, schema):
    order = list(schema["properties"])
    positions = [order.index(k) for k in value]
    return positions == sorted(positions)


def test_json_object_outputs_are_json_objects(demo_server):
    # Without the constraint the demo model's text is not JSON.
    plain = complete(demo_server, max_tokens=40, temperature=1.0, seed=1)["choices"][0]["text"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(plain)
    # A nudge towards quotes and braces so that random strings end within max_tokens.
    vocab = demo_vocab(demo_server)
    bias = {str(vocab['"']): 6, str(vocab["}"]): 6}
    stopped = 0
    for seed in range(6):
        body = complete(demo_server, max_tokens=300, temperature=1.0, seed=seed, n=2, logit_bias=bias,
                        response_format={"type": "json_object"})
        for choice in body["choices"]:
            if choice["finish_reason"] == "stop":
                stopped += 1
                assert isinstance(json.loads(choice["text"]), dict), choice["text"]
    assert stopped >= 8


@pytest.mark.parametrize("schema", [PERSON, NESTED], ids=["person", "nested"])
def test_json_schema_outputs_validate(demo_server, schema):
    for seed in range(4):
        body = complete(demo_server, max_tokens=400, temperature=1.0, seed=seed, n=2,
                        response_format=json_schema_format(schema))
        for choice in body["choices"]:
            assert choice["finish_reason"] == "stop", choice
            value = json.loads(choice["text"])
            jsonschema.validate(value, schema)
            assert keys_in_schema_order(value, schema)
    assert "structured output: the vocabulary's 512 tokens indexed" in demo_server.read_log()


def test_metrics_count_the_structured_choices(demo_server):
    def structured():
        text = requests.get(demo_server.url + "/metrics", timeout=10).text
        return metric(text, "tessera_structured_choices_total")
    before = structured()
    complete(demo_server, max_tokens=400, temperature=1.0, seed=1, n=3, response_format=json_schema_format(PERSON))
    complete(demo_server, max_tokens=8, temperature=1.0, seed=1, n=2)  # free text: not counted
    assert structured() - before == 3


def test_chat_and_streaming_through_the_openai_client(demo_server):
    client = openai.OpenAI(base_url=demo_server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    messages = [{"role": "user", "content": "Describe a person as JSON."}]
    answer = client.chat.completions.create(model="demo", messages=messages, temperature=0.8, seed=3, max_tokens=400,
                                            response_format=json_schema_format(PERSON))
    jsonschema.validate(json.loads(answer.choices[0].message.content), PERSON)
    assert answer.choices[0].finish_reason == "stop"
    text, finish = "", None
    for chunk in client.chat.completions.create(model="demo", messages=messages, temperature=0.8, seed=4,
                                                max_tokens=400, stream=True,
                                                response_format=json_schema_format(PERSON)):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert finish == "stop"
    jsonschema.validate(json.loads(text), PERSON)


def test_vllms_guided_choice_and_guided_json(demo_server):
    choices = ["yes", "no", "yes, and more", "maybe not"]
    seen = set()
    for seed in range(8):
        body = complete(demo_server, max_tokens=20, temperature=1.0, seed=seed, guided_choice=choices)
        text = body["choices"][0]["text"]
        assert text in choices and body["choices"][0]["finish_reason"] == "stop", body
        seen.add(text)
    assert len(seen) >= 2  # sampled, not one fixed answer
    for schema in (PERSON, json.dumps(PERSON)):  # the schema, or its text
        body = complete(demo_server, max_tokens=400, temperature=1.0, seed=5, guided_json=schema)
        jsonschema.validate(json.loads(body["choices"][0]["text"]), PERSON)


PATTERNS = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"},
        "mail": {"type": "string", "format": "email", "maxLength": 24},
        "word": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5},
        "v6": {"type": "string", "format": "ipv6"},
        "site": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083},  # Pydantic's HttpUrl
        "link": {"type": "string", "format": "uri", "maxLength": 24},
        "span": {"type": "string", "format": "duration"},  # Pydantic's timedelta
        "host": {"type": "string", "format": "hostname"},
    },
    "required": ["code", "day", "at", "id", "ip", "mail", "word", "v6", "site", "link", "span", "host"],
}


def test_patterns_and_formats_hold_end_to_end(demo_server):
    # The reference: jsonschema's draft 2020-12 format checks (time and
    # date-time through rfc3339-validator, uri through rfc3986-validator,
    # duration through isoduration, hostname through fqdn), which check
    # formats only when asked.
    validator = jsonschema.Draft202012Validator(PATTERNS, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    good = {"code": "AB-123", "day": "2024-02-29", "at": "2024-02-29T12:00:00Z",
            "id": "123e4567-e89b-12d3-a456-426614174000", "ip": "10.0.0.1", "mail": "a@b.io", "word": "abc",
            "v6": "::1", "site": "https://example.com/a?b", "link": "x:y", "span": "PT0.5S", "host": "a.b"}
    assert validator.is_valid(good)
    # Each format is checked: a value that breaks only it is refused (date-time needs rfc3339-validator).
    # jsonschema's email check wants only an "@"; the standard library's address parser is the stricter reference.
    for key, bad in [("day", "2023-02-29"), ("at", "2024-02-29 12:00:00"), ("id", "123"), ("ip", "1.2.3.256"),
                     ("v6", "1::2::3"), ("site", "example.com"), ("link", "https://example.com/" + 10 * "a"),
                     ("span", "P1H"), ("host", "a..b")]:
        assert not validator.is_valid({**good, key: bad}), key
    # A nudge towards colons and quotes: a URI of up to 2,083 characters needs
    # its scheme's colon, and random weights may otherwise ramble in it past max_tokens.
    vocab = demo_vocab(demo_server)
    bias = {str(vocab['"']): 4, str(vocab[":"]): 4}
    values = finished_values(demo_server, PATTERNS, bias, max_tokens=1000)
    for value in values:
        validator.validate(value)
        assert Address(addr_spec=value["mail"]).addr_spec == value["mail"]
    assert len(values) >= 4


SCORES = {
    "type": "object",
    "properties": {
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "delta": {"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": 2.5},
        "step": {"type": "integer", "multipleOf": 5, "minimum": -100, "maximum": 100},
        "counts": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}, "maxProperties": 2},
        "pair": {"type": "array", "prefixItems": [{"type": "string", "maxLength": 4}, {"type": "boolean"}],
                 "items": False, "minItems": 2},
    },
    "required": ["confidence", "delta", "step", "counts", "pair"],
}


def test_bounded_numbers_maps_and_tuples_end_to_end(demo_server):
    # Pydantic's confloat(ge=0, le=1), conint(multiple_of=5, ge=-100, le=100), dict[str, NonNegativeInt]
    # and tuple[str, bool].
    vocab = demo_vocab(demo_server)
    bias = {str(vocab['"']): 6, str(vocab["}"]): 6}  # so that the map's free keys mostly end within max_tokens
    values = finished_values(demo_server, SCORES, bias)
    for value in values:
        jsonschema.validate(value, SCORES)
    assert len(values) >= 5


def palette(unique):
    """Pydantic's set[Color] (or list[Color]): an enum's items through a $ref."""
    return {"$defs": {"Color": {"enum": ["red", "green", "blue"], "type": "string"}},
            "type": "object",
            "properties": {"colors": {"type": "array", "items": {"$ref": "#/$defs/Color"}, "uniqueItems": unique,
                                      "minItems": 2, "maxItems": 3}},
            "required": ["colors"]}


def test_a_set_of_an_enum_takes_each_value_once(demo_server):
    repeated = 0
    for seed in range(6):
        for unique in (False, True):
            body = complete(demo_server, max_tokens=200, temperature=1.0, seed=seed,
                            response_format=json_schema_format(palette(unique)))
            choice = body["choices"][0]
            assert choice["finish_reason"] == "stop", choice
            colors = json.loads(choice["text"])["colors"]
            jsonschema.validate({"colors": colors}, palette(unique))
            if unique:
                assert len(set(colors)) == len(colors), colors
            else:
                repeated += len(set(colors)) < len(colors)
    assert repeated >= 1, "the same requests without uniqueItems repeat a value"


def counts_by_color(named):
    """Pydantic's dict[Color, int] (or, without propertyNames, dict[str, int])."""
    schema = {"$defs": {"Color": {"enum": ["red", "green", "blue"], "type": "string"}},
              "type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2}
    if named:
        schema["propertyNames"] = {"$ref": "#/$defs/Color"}
    return schema


def stray_keys(server, schema_of, key_held):
    """At four seeds: asserts that the answer under schema_of(True) has keys, each passing key_held, and
    counts the answers under schema_of(False), the same map without that hold, with a key that does not."""
    vocab = demo_vocab(server)
    bias = {str(vocab['"']): 6}  # so that the free keys of the plain map end soon
    stray = 0
    for seed in range(4):
        for held in (False, True):
            schema = schema_of(held)
            body = complete(server, max_tokens=300, temperature=1.0, seed=seed, logit_bias=bias,
                            response_format=json_schema_format(schema))
            choice = body["choices"][0]
            assert choice["finish_reason"] == "stop", choice
            value = json.loads(choice["text"])
            jsonschema.validate(value, schema)
            keys_held = bool(value) and all(key_held(key) for key in value)
            if held:
                assert keys_held, value
            else:
                stray += not keys_held
    return stray


def test_a_maps_keys_hold_to_property_names(demo_server):
    stray = stray_keys(demo_server, counts_by_color, lambda key: key in {"red", "green", "blue"})
    assert stray >= 2, "the same requests without propertyNames write other keys"


def counts_by_code(patterned):
    """Pydantic's dict[constr(pattern=r"^[a-z]{1,3}$"), int] (or, without the pattern, dict[str, int])."""
    values = {"patternProperties": {"^[a-z]{1,3}$": {"type": "integer"}}} if patterned else {
        "additionalProperties": {"type": "integer"}}
    return {"type": "object", **values, "minProperties": 1, "maxProperties": 2}


def test_a_maps_pattern_properties_hold_its_keys(demo_server):
    # Other keys would be valid too (there is no additionalProperties false), so the check that only
    # matching keys are written is the test's own.
    stray = stray_keys(demo_server, counts_by_code, lambda key: re.fullmatch("[a-z]{1,3}", key) is not None)
    assert stray >= 2, "the same requests without patternProperties write other keys"


class Record(pydantic.BaseModel):
    """Pydantic's own formats and constraints, as a user of the openai client declares a response."""
    id: pydantic.UUID4
    host: pydantic.IPvAnyAddress
    net: IPvAnyNetwork
    iface: IPvAnyInterface
    token: pydantic.SecretStr
    blob: pydantic.conbytes(max_length=4)
    step: pydantic.conint(multiple_of=5, ge=-100, le=100)
    codes: dict[pydantic.constr(pattern=r"^[a-z]{2}$"), int] = pydantic.Field(max_length=2)
    span: datetime.timedelta
    when: datetime.datetime
    day: datetime.date
    at: datetime.time
    url: pydantic.HttpUrl
    link: Annotated[pydantic.AnyUrl, pydantic.UrlConstraints(max_length=40)]
    mail: pydantic.EmailStr


def test_answers_validate_as_the_pydantic_model_of_their_schema(demo_server):
    # The model's checks are stricter than its schema's: UUID4's version digit, bytes' length in bytes,
    # a timedelta's range, what a WHATWG URL parser takes, HttpUrl's schemes, special-use mail domains.
    schema = Record.model_json_schema()
    vocab = demo_vocab(demo_server)
    values = finished_values(demo_server, schema, {str(vocab['"']): 6, str(vocab["}"]): 6}, max_tokens=1500)
    for value in values:
        jsonschema.validate(value, schema)
        Record.model_validate_json(json.dumps(value))
    assert len(values) >= 5


def test_vllms_guided_regex_is_matched_whole(demo_server):
    pattern = r"(yes|no), \d{1,3} (apples|pears)\."
    plain = complete(demo_server, max_tokens=20, temperature=1.0, seed=1)["choices"][0]["text"]
    assert re.fullmatch(pattern, plain) is None
    seen = set()
    for seed in range(6):
        body = complete(demo_server, max_tokens=40, temperature=1.0, seed=seed, guided_regex=pattern)
        text = body["choices"][0]["text"]
        assert re.fullmatch(pattern, text) and body["choices"][0]["finish_reason"] == "stop", body
        seen.add(text)
    assert len(seen) >= 2
    # Chat, streamed: the answer is the pattern's too.
    reply = requests.post(demo_server.url + "/v1/chat/completions", timeout=120, stream=True, json={
        "model": "demo", "messages": [{"role": "user", "content": "A phone number?"}], "stream": True,
        "temperature": 1.0, "seed": 2, "max_tokens": 40, "guided_regex": r"\+1-\d{3}-\d{4}"})
    assert reply.status_code == 200, reply.text
    text = ""
    for line in reply.iter_lines():
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    assert re.fullmatch(r"\+1-\d{3}-\d{4}", text), text


CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"}},
        "required": ["city", "days"], "additionalProperties": False}


def test_a_conforming_answer_passes_unchanged_and_another_is_made_to_conform(tessera_bin, tmp_path):
    conforming = [('{"city": "Paris"', False), (', "days": 3}', False), ("</s>", True)]
    model = scripted_model(tessera_bin, tmp_path / "conforming", conforming, [])
    server = Server(tessera_bin, model, tmp_path / "conforming.log")
    try:
        body = complete(server, max_tokens=20, temperature=0, response_format=json_schema_format(CITY))
        assert body["choices"][0]["text"] == '{"city": "Paris", "days": 3}'
        assert body["choices"][0]["finish_reason"] == "stop"
        assert body["usage"]["completion_tokens"] == 2  # done at the brace: no end token needed
    finally:
        assert server.stop() == 0
    chatty = [("Sure! Here you go: ", False), ('{"city": "Paris", "days": 3}', False), ("</s>", True)]
    model = scripted_model(tessera_bin, tmp_path / "chatty", chatty, [])
    server = Server(tessera_bin, model, tmp_path / "chatty.log")
    try:
        free = complete(server, max_tokens=20, temperature=0)["choices"][0]["text"]
        assert free == 'Sure! Here you go: {"city": "Paris", "days": 3}'
        with pytest.raises(json.JSONDecodeError):
            json.loads(free)
        # Greedy over the masked scripted logits takes the lowest id allowed: whitespace runs up to their cap.
        body = complete(server, max_tokens=400, temperature=0, response_format=json_schema_format(CITY))
        assert body["choices"][0]["finish_reason"] == "stop"
        jsonschema.validate(json.loads(body["choices"][0]["text"]), CITY)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("response_format, extra, param, words", [
    ({"type": "json_schema"}, {}, "response_format.json_schema", "must be an object"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, {}, "response_format.json_schema.schema", "is required"),
    (json_schema_format({"type": "string", "pattern": "^(?=a)"}), {}, "response_format.json_schema.schema",
     "'#/pattern': lookaround assertions are not supported at offset 1"),
    (json_schema_format({"type": "object", "properties": {"d": {"type": "string", "format": "iri"}}}), {},
     "response_format.json_schema.schema", "'#/properties/d/format': format 'iri' is not supported"),
    (json_schema_format({"type": "array", "items": {"type": "string"}, "uniqueItems": True}), {},
     "response_format.json_schema.schema", "'#/uniqueItems': uniqueItems is supported for items of an enum"),
    (json_schema_format({"$ref": "#/$defs/none"}), {}, "response_format.json_schema.schema", "names nothing"),
    ("json", {}, "response_format", "must be an object"),
    ({"type": "json_object"}, {"ignore_eos": True}, "ignore_eos", "cannot be combined"),
    (None, {"guided_regex": "(a+"}, "guided_regex", "an unterminated group at offset 0"),
    (None, {"guided_regex": 5}, "guided_regex", "must be a string"),
    (None, {"guided_regex": "a+", "guided_choice": ["a"]}, "guided_choice", "one of"),
    (None, {"guided_grammar": "root ::= x"}, "guided_grammar", "not supported"),
    (None, {"guided_choice": []}, "guided_choice", "list of 1 to 64"),
    (None, {"guided_choice": ["a", ""]}, "guided_choice", "non-empty strings"),
    (None, {"guided_choice": ["a"], "guided_json": {}}, "guided_choice", "one of"),
    (None, {"guided_json": "{not json"}, "guided_json", "must hold a JSON Schema"),
    (None, {"guided_json": {"type": "string", "pattern": "\\p{L}"}}, "guided_json", "guided_json at '#/pattern'"),
    ({"type": "json_object"}, {"guided_choice": ["a"]}, "response_format", "give one of"),
])
def test_bad_response_formats_get_clear_errors(demo_server, response_format, extra, param, words):
    body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], **extra}
    if response_format is not None:
        body["response_format"] = response_format
    reply = requests.post(demo_server.url + "/v1/chat/completions", timeout=60, json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param
    assert words in error["message"], error["message"]
