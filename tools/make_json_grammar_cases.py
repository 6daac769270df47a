#!/usr/bin/env python3
"""Writes tests/fixtures/json_grammar_cases.json: for a set of JSON Schemas
(and response_format json_object), documents and whether Python's json module
and the jsonschema package take them.

For each schema, documents written the way structured output writes them
(properties in the schema's order, whitespace runs of at most 20 bytes,
numbers of at most 24 digits, strings with escapes, surrogate pairs and raw
UTF-8), all valid ("canonical": true), then byte-level mutations of them
(deleted, inserted, replaced and swapped bytes, truncations) with their
validity as the reference sees it. tests/text/json_matcher_test.cc checks that
tessera's JsonMatcher takes every canonical document and no invalid one.

    python3 tools/make_json_grammar_cases.py [OUT]

Needs jsonschema, rfc3339-validator, rfc3986-validator, isoduration, fqdn and
pydantic, whose own check is the reference for its formats (uuid4, ...)
(requirements-test.txt).
Deterministic: the same file on every run.
"""

import copy
import ipaddress
import json
import math
import random
import sys
from pathlib import Path

from email.headerregistry import Address

import jsonschema
import pydantic
from pydantic.networks import IPvAnyInterface, IPvAnyNetwork

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "json_grammar_cases.json"
MAX_WHITESPACE = 20
VALID_PER_SCHEMA = 20
MUTANTS_PER_SCHEMA = 90

SCHEMAS = {
    "json_object": None,
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer"},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        },
        "required": ["name", "age", "ok", "tags"],
    },
    "optional_properties": {
        "type": "object",
        "properties": {
            "a": {"type": "number"},
            "b": {"type": "string"},
            "c": {"type": "null"},
            "d": {"type": ["integer", "null"]},
        },
        "required": ["b"],
        "additionalProperties": False,
    },
    "refs_and_any_of": {
        "$defs": {
            "point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
            }
        },
        "type": "object",
        "properties": {
            "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 1},
            "label": {"anyOf": [{"type": "string", "minLength": 2, "maxLength": 5}, {"type": "null"}]},
        },
        "required": ["points", "label"],
    },
    "recursive_tree": {
        "type": "object",
        "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2},
        },
        "required": ["value", "children"],
    },
    "mixed_enum": {"enum": ["red", "green", 1, 10, 1.5, True, None, {"a": [1, 2]}]},
    "top_level_number": {"type": "number"},
    "escaped_names": {
        "type": "object",
        "properties": {"k\"ey": {"const": "é\n\"x"}, "ünï": {"type": "string"}},
        "required": ["k\"ey", "ünï"],
    },
    "short_string": {"type": "string", "minLength": 1, "maxLength": 3},
    "array_of_anything": {"type": "array", "items": {}},
    "empty_object": {"type": "object", "properties": {}, "additionalProperties": False},
    "bounded_integers": {
        "type": "object",
        "properties": {
            "small": {"type": "integer", "minimum": -15, "maximum": 130},
            "positive": {"type": "integer", "exclusiveMinimum": 0},
            "negative": {"type": "integer", "maximum": -3, "exclusiveMinimum": -1000},
            "exact": {"type": "integer", "minimum": 7, "maximum": 7},
        },
        "required": ["small", "positive", "negative", "exact"],
    },
    "bounded_numbers": {
        "type": "object",
        "properties": {
            "p": {"type": "number", "minimum": 0, "maximum": 1},
            "t": {"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": 2.5},
            "x": {"type": "number", "minimum": 0.1, "maximum": 0.3},
            "big": {"type": ["number", "null"], "minimum": 1000, "exclusiveMaximum": 1000.5},
        },
        "required": ["p", "t", "x", "big"],
    },
    # Maps and tuples.
    "map_of_small_integers": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0,
                                                                          "maximum": 99},
                              "minProperties": 1, "maxProperties": 3},
    "tuple": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "maxLength": 3},
                                               {"enum": ["x", "y"]}], "items": False, "minItems": 2},
    "tuple_then_numbers": {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "null"}],
                           "items": {"type": "number"}, "maxItems": 4},
    # Strings under a pattern or a format: the documents write one of the
    # schema's examples (an annotation the compiler ignores).
    "patterns": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$", "examples": ["AB-123", "ZZ-000"]},
            "anywhere": {"type": "string", "pattern": "ab", "examples": ["ab", "xaby", "\u00e9ab\n"]},
            "quoted": {"pattern": '^"[a-z\\\\/]*"$', "examples": ['"a\\b"', '""', '"x/y"']},
            "word": {"type": "string", "pattern": "^[a-z\u00e9]+$", "minLength": 2, "maxLength": 4,
                     "examples": ["ab", "\u00e9t\u00e9", "abcd"]},
            "lines": {"type": "string", "pattern": "^(?:[a-c]+\\n)+$", "examples": ["a\n", "ab\nc\n"]},
        },
        "required": ["code", "anywhere", "quoted", "word", "lines"],
    },
    "formats": {
        "type": "object",
        "properties": {
            "date": {"type": "string", "format": "date", "examples": ["2024-02-29", "1999-12-31", "0001-01-01"]},
            "time": {"type": "string", "format": "time", "examples": ["23:59:59Z", "00:00:00.5+05:30"]},
            "at": {"type": "string", "format": "date-time",
                   "examples": ["2026-12-07T16:15:21Z", "2000-02-29T12:00:00.123-01:00"]},
            "id": {"type": "string", "format": "uuid", "examples": ["123e4567-e89b-12d3-a456-426614174000"]},
            "ip": {"type": "string", "format": "ipv4", "examples": ["192.168.0.1", "0.0.0.0", "255.255.255.255"]},
            "mail": {"type": "string", "format": "email", "examples": ["a.b@example.com", "x+y@mail.co"]},
        },
        "required": ["date", "time", "at", "id", "ip", "mail"],
    },
    # Pydantic's IPv6Address, HttpUrl (a URI of 1 to 2,083 characters, whose
    # maximum the matcher counts) and timedelta, a URI at its maximum of 40,
    # and a host name (one at its 253 characters).
    "more_formats": {
        "type": "object",
        "properties": {
            "v6": {"type": "string", "format": "ipv6",
                   "examples": ["::1", "2001:db8::ff00:42:8329", "::ffff:192.0.2.128", "1:2:3:4:5:6:7:8"]},
            "site": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083,  # HttpUrl: http(s) only
                     "examples": ["https://example.com/a?b=c#d", "HTTP://ada@10.0.0.1:65535", "http://[::1]:8080/x"]},
            "short": {"type": "string", "format": "uri", "maxLength": 40,
                      "examples": ["https://example.com/some/longer/path1234", "ftp://a.b/c%20d", "x:y"]},
            "span": {"type": "string", "format": "duration", "examples": ["P1DT2H", "PT0.5S", "P3W", "P1Y2M3DT4H5M6S"]},
            "host": {"type": "string", "format": "hostname",
                     "examples": ["localhost", "my-host.example.com", "x1.y2", ".".join(["a" * 63] * 3 + ["b" * 61])]},
        },
        "required": ["v6", "site", "short", "span", "host"],
    },
    # Pydantic's set of an Enum or a Literal: uniqueItems over an enum's items.
    "distinct_items": {
        "type": "object",
        "properties": {
            "colors": {"type": "array", "items": {"enum": ["red", "green", "blue", 7, None]}, "uniqueItems": True,
                       "minItems": 1},
            "flags": {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "maxItems": 2},
        },
        "required": ["colors", "flags"],
    },
    # Pydantic's dict[Color, int] and a map whose keys have a pattern: propertyNames.
    "keyed_maps": {
        "type": "object",
        "properties": {
            "by_color": {"type": "object", "additionalProperties": {"type": "integer"},
                         "propertyNames": {"enum": ["red", "green", "r"]}, "maxProperties": 3},
            "by_code": {"type": "object", "additionalProperties": {"type": "boolean"},
                        "propertyNames": {"pattern": "^[A-Z]{2}$", "examples": ["FR", "DE", "JP"]}, "maxProperties": 2},
        },
        "required": ["by_color", "by_code"],
    },
    # multipleOf, whole: an integer's, and a number's (written as an integer).
    "multiples": {
        "type": "object",
        "properties": {
            "even": {"type": "integer", "multipleOf": 2},
            "step": {"type": "integer", "multipleOf": 5, "minimum": -12, "maximum": 40},
            "quarters": {"type": "integer", "multipleOf": 25, "exclusiveMinimum": 0},
            "whole": {"type": ["number", "null"], "multipleOf": 3.0, "maximum": 100.5},
            "big": {"type": "integer", "multipleOf": 1000000007},
        },
        "required": ["even", "step", "quarters", "whole", "big"],
    },
    # Pydantic's dict[constr(pattern=...), int]: patternProperties of one pattern.
    "pattern_maps": {
        "type": "object",
        "properties": {
            "codes": {"type": "object", "patternProperties": {"^[a-z]{2}_\\d$": {"type": "integer", "minimum": 0}},
                      "additionalProperties": False, "maxProperties": 3},
            "tagged": {"patternProperties": {"-": {"type": ["string", "null"], "maxLength": 2}}},
        },
        "required": ["codes", "tagged"],
    },
    # Pydantic's own formats: UUID4, UUID7, IPvAnyAddress, SecretStr, conbytes(max_length=4), IPvAnyNetwork,
    # IPv4Interface.
    "pydantic_formats": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid4",
                   "examples": ["12345678-9abc-4def-8123-456789abcdef", "00000000-0000-4000-B000-00000000000A"]},
            "v7": {"type": "string", "format": "uuid7", "examples": ["01890a5d-ac96-774b-bcce-b302099a8057"]},
            "host": {"type": "string", "format": "ipvanyaddress",
                     "examples": ["10.0.0.1", "::1", "2001:db8::8a2e:370:7334", "::ffff:192.0.2.128"]},
            "secret": {"type": "string", "format": "password", "writeOnly": True,
                       "examples": ["", "hunter2", "d\u00e9j\u00e0 vu\n", "\" quoted \\"]},
            "blob": {"type": "string", "format": "binary", "maxLength": 4, "examples": ["", "abcd", "a\"\\", "\n\t"]},
            "net": {"type": "string", "format": "ipvanynetwork",
                    "examples": ["10.128.0.0/9", "192.168.1.4/30", "2001:db8::/32", "::/0", "10.0.0.1"]},
            "iface": {"type": "string", "format": "ipv4interface", "examples": ["10.0.0.1/8", "10.0.0.1", "0.0.0.0/0"]},
        },
        "required": ["id", "v7", "host", "secret", "blob", "net", "iface"],
    },
}

# Keys that match each patternProperties pattern above, for the writer.
PATTERN_KEYS = {"^[a-z]{2}_\\d$": ["ab_1", "zz_9", "qx_0"], "-": ["-", "a-b", "x-\u00e9", "--"]}


def is_email(instance):
    """The standard library's RFC 5322 addr-spec parser, stricter than jsonschema's check for an @."""
    if not isinstance(instance, str):
        return True
    try:
        address = Address(addr_spec=instance)
    except (ValueError, IndexError, TypeError):
        return False
    return address.addr_spec == instance and bool(address.domain)


# Draft 2020-12's format checks (time and date-time through rfc3339-validator), email's made strict.
FORMAT_CHECKER = copy.deepcopy(jsonschema.Draft202012Validator.FORMAT_CHECKER)
FORMAT_CHECKER.checkers["email"] = (is_email, ())


def pydantic_checker(kind):
    """Pydantic's own check of one of its formats: whether it reads the string as `kind`."""
    adapter = pydantic.TypeAdapter(kind)

    def check(instance):
        try:
            adapter.validate_python(instance)
            return True
        except pydantic.ValidationError:
            return False
    return check, ()


for _version in (1, 3, 4, 5, 6, 7, 8):
    FORMAT_CHECKER.checkers[f"uuid{_version}"] = pydantic_checker(getattr(pydantic, f"UUID{_version}"))
FORMAT_CHECKER.checkers["ipvanyaddress"] = pydantic_checker(pydantic.IPvAnyAddress)
for _format, _kind in (("ipv4network", ipaddress.IPv4Network), ("ipv6network", ipaddress.IPv6Network),
                       ("ipvanynetwork", IPvAnyNetwork), ("ipv4interface", ipaddress.IPv4Interface),
                       ("ipv6interface", ipaddress.IPv6Interface), ("ipvanyinterface", IPvAnyInterface)):
    FORMAT_CHECKER.checkers[_format] = pydantic_checker(_kind)
# jsonschema leaves a format unchecked when its checker's package is missing.
for _format in ("date-time", "time", "uri", "ipv6", "duration", "hostname"):
    assert _format in FORMAT_CHECKER.checkers, \
        f"jsonschema cannot check '{_format}': pip install -r requirements-test.txt"



def whitespace(rng):
    if rng.random() < 0.5:
        return ""
    return "".join(rng.choice(" \n\t\r") for _ in range(rng.randint(1, MAX_WHITESPACE)))


def string_piece(rng):
    """One code point of a JSON string's text: raw, or an escape."""
    roll = rng.random()
    if roll < 0.55:
        return rng.choice("abcdefghij klmnopqrstuvwxyz0123456789{}[]:,'")
    if roll < 0.7:
        return rng.choice(["é", "ü", "中", "€", "😀", "Ω"])
    if roll < 0.85:
        return rng.choice(['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"])
    if roll < 0.95:
        return "\\u%04x" % rng.choice([0x41, 0xE9, 0x4E2D, 0x20AC, 0x0001])
    return "\\ud83d\\ude00"  # one code point, written as a surrogate pair


def string_text(rng, min_length=0, max_length=None):
    upper = max_length if max_length is not None else min_length + 8
    count = rng.randint(min_length, max(min_length, upper))
    return '"' + "".join(string_piece(rng) for _ in range(count)) + '"'


def number_text(rng, integer):
    text = rng.choice(["-", ""]) + rng.choice(["0", str(rng.randint(1, 10**rng.randint(1, 12)))])
    if not integer:
        if rng.random() < 0.5:
            text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.3:
            text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 99))
    return text


def multiple_text(rng, schema):
    """A multiple of a whole multipleOf within the bounds, as structured output writes it: at most 15 digits."""
    largest = 10**15 - 1
    low = max([-largest] + [math.ceil(schema[k]) for k in ("minimum",) if k in schema]
              + [math.floor(schema[k]) + 1 for k in ("exclusiveMinimum",) if k in schema])
    high = min([largest] + [math.floor(schema[k]) for k in ("maximum",) if k in schema]
               + [math.ceil(schema[k]) - 1 for k in ("exclusiveMaximum",) if k in schema])
    m = int(schema["multipleOf"])
    first, last = -(-low // m), high // m
    # Small multiples as often as large ones.
    k = rng.choice([rng.randint(first, last), rng.randint(max(first, -20), min(last, 20))])
    return str(k * m)


def bounded_number_text(rng, schema):
    """A number within the schema's bounds as structured output writes it: no exponent, at most 15 digits."""
    low = max(schema.get("minimum", -1e6), schema.get("exclusiveMinimum", -1e6))
    high = min(schema.get("maximum", 1e6), schema.get("exclusiveMaximum", 1e6))
    validator = jsonschema.Draft202012Validator({k: v for k, v in schema.items() if k != "type"})
    while True:
        roll = rng.random()
        if roll < 0.2:
            text = repr(float(rng.choice([low, high])))  # a bound itself, or just inside an exclusive one
            text = text[:-2] if text.endswith(".0") and rng.random() < 0.5 else text
        else:
            text = f"{rng.uniform(low, high):.{rng.randint(0, 6)}f}"
        digits = sum(ch.isdigit() for ch in text)
        if "e" not in text and digits <= 15 and validator.is_valid(json.loads(text)):
            return text


def any_text(rng, depth):
    kinds = ["string", "number", "true", "false", "null"] + (["object", "array"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "string":
        return string_text(rng)
    if kind == "number":
        return number_text(rng, False)
    if kind in ("true", "false", "null"):
        return kind
    if kind == "array":
        items = [any_text(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return array_text(rng, items)
    members = [(string_text(rng), any_text(rng, depth + 1)) for _ in range(rng.randint(0, 3))]
    return object_text(rng, members)


def array_text(rng, items):
    if not items:
        return "[" + whitespace(rng) + "]"
    return "[" + ",".join(whitespace(rng) + item + whitespace(rng) for item in items) + "]"


def object_text(rng, members):
    if not members:
        return "{" + whitespace(rng) + "}"
    parts = [whitespace(rng) + key + whitespace(rng) + ":" + whitespace(rng) + value + whitespace(rng)
             for key, value in members]
    return "{" + ",".join(parts) + "}"


def resolve(root, schema):
    while isinstance(schema, dict) and "$ref" in schema:
        pointer = schema["$ref"]
        schema = root
        for token in pointer[2:].split("/") if pointer != "#" else []:
            schema = schema[token.replace("~1", "/").replace("~0", "~")]
    return schema


def value_text(rng, root, schema, depth=0):
    """A document of `schema`, written as structured output writes it."""
    schema = resolve(root, schema)
    if schema is None or schema == {} or schema is True:
        return any_text(rng, depth)
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False, separators=(",", ":"))
    if "enum" in schema:
        return json.dumps(rng.choice(schema["enum"]), ensure_ascii=False, separators=(",", ":"))
    if "anyOf" in schema:
        return value_text(rng, root, rng.choice(schema["anyOf"]), depth)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = rng.choice(kind)
    if kind == "string" or "pattern" in schema or "format" in schema:
        if "examples" in schema:
            return json.dumps(rng.choice(schema["examples"]), ensure_ascii=False)
        return string_text(rng, schema.get("minLength", 0), schema.get("maxLength"))
    if kind in ("integer", "number") and "multipleOf" in schema:
        return multiple_text(rng, schema)
    if kind == "integer" and any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        low = max(schema.get("minimum", -10**12), schema.get("exclusiveMinimum", -10**12 - 1) + 1)
        high = min(schema.get("maximum", 10**12), schema.get("exclusiveMaximum", 10**12 + 1) - 1)
        return str(rng.randint(low, high))
    if kind == "number" and any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        return bounded_number_text(rng, schema)
    if kind in ("number", "integer"):
        return number_text(rng, kind == "integer")
    if kind == "boolean":
        return rng.choice(["true", "false"])
    if kind == "null":
        return "null"
    if kind == "array" or "prefixItems" in schema:
        prefix = schema.get("prefixItems", [])
        rest = schema.get("items", {})
        low = schema.get("minItems", 0)
        high = schema.get("maxItems", max(low, len(prefix)) + 3)
        if rest is False:
            high = min(high, len(prefix))
        if depth > 2:
            high = low
        count = rng.randint(low, high)
        if schema.get("uniqueItems"):  # drawn until each value is new (the schemas keep count within them)
            items, seen = [], []
            while len(items) < count:
                text = value_text(rng, root, rest, depth + 1)
                value = json.loads(text)
                if not any(value == v and type(value) is type(v) for v in seen):
                    seen.append(value)
                    items.append(text)
            return array_text(rng, items)
        items = [value_text(rng, root, prefix[i] if i < len(prefix) else rest, depth + 1) for i in range(count)]
        return array_text(rng, items)
    if "properties" not in schema:
        extra = schema.get("additionalProperties", True)
        if extra is False:
            return "{" + whitespace(rng) + "}"
        values = (lambda: value_text(rng, root, extra, depth + 1)) if isinstance(extra, dict) else (
            lambda: any_text(rng, depth + 1))
        low = schema.get("minProperties", 0)
        names = schema.get("propertyNames")  # keys by it: a string's schema (its examples) or an enum's value
        key = (lambda: value_text(rng, root, names, depth + 1)) if names is not None else (lambda: string_text(rng))
        if "patternProperties" in schema:  # keys matching the one pattern, with its values
            [(pattern, sub)] = schema["patternProperties"].items()
            # Raw UTF-8: a string under a pattern is written without \u escapes.
            key = lambda: json.dumps(rng.choice(PATTERN_KEYS[pattern]), ensure_ascii=False)
            values = lambda: value_text(rng, root, sub, depth + 1)
        members = [(key(), values()) for _ in range(rng.randint(low, schema.get("maxProperties", low + 3)))]
        return object_text(rng, members)
    required = set(schema.get("required", []))
    members = []
    for name, sub in schema["properties"].items():
        if name in required or rng.random() < 0.5:
            key = json.dumps(name, ensure_ascii=False)
            members.append((key, value_text(rng, root, sub, depth + 1)))
    return object_text(rng, members)


def reference_valid(data, schema):
    """Python's json and jsonschema on raw bytes: UTF-8, JSON, then the schema."""
    def refuse_constant(name):
        raise ValueError(name)

    try:
        value = json.loads(data.decode("utf-8"), parse_constant=refuse_constant)
    except (UnicodeDecodeError, ValueError):
        return False
    if schema is None:
        return isinstance(value, dict)
    return jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER).is_valid(value)


ALPHABET = list(b'{}[]":,0123456789-+.eEtrufalsn \\\n\t"\'a') + [0x01, 0xC3, 0xA9, 0xFF]


def mutate(rng, data):
    data = bytearray(data)
    op = rng.choice(["delete", "insert", "replace", "truncate", "swap"])
    i = rng.randrange(len(data)) if data else 0
    if op == "delete" and data:
        del data[i]
    elif op == "insert":
        data.insert(i, rng.choice(ALPHABET))
    elif op == "replace" and data:
        data[i] = rng.choice(ALPHABET)
    elif op == "truncate":
        data = data[:i]
    elif op == "swap" and len(data) > 1:
        j = rng.randrange(len(data))
        data[i], data[j] = data[j], data[i]
    return bytes(data)


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    rng = random.Random(20261207)
    cases = []
    for name, schema in SCHEMAS.items():
        documents = []
        valid = []
        for _ in range(VALID_PER_SCHEMA):
            written = schema if schema is not None else {"type": "object"}  # json_object
            data = value_text(rng, written, written).encode("utf-8")
            assert reference_valid(data, schema), (name, data)
            valid.append(data)
            documents.append({"hex": data.hex(), "valid": True, "canonical": True})
        for _ in range(MUTANTS_PER_SCHEMA):
            data = mutate(rng, rng.choice(valid))
            documents.append({"hex": data.hex(), "valid": reference_valid(data, schema), "canonical": False})
        cases.append({"name": name, "schema": schema, "documents": documents})
    out.write_text(json.dumps({"generator": "tools/make_json_grammar_cases.py", "cases": cases}, ensure_ascii=False,
                              indent=1) + "\n")
    invalid = sum(not d["valid"] for c in cases for d in c["documents"])
    print(f"{out}: {len(cases)} schemas, {sum(len(c['documents']) for c in cases)} documents, {invalid} invalid")


if __name__ == "__main__":
    main()
