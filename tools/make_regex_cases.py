#!/usr/bin/env python3
"""Writes tests/fixtures/regex_cases.json: for a set of regular expressions,
strings and what Python's regex engines say of them, for
tests/text/regex_automaton_test.cc.

For each pattern: strings that match (written by hand below), then
character-level mutations of them (deleted, inserted, replaced characters,
truncations). Each string gets
  - "match": whether the pattern matches it (Python's re: fullmatch for a
    whole-text pattern, search for a JSON Schema pattern, which matches
    anywhere unless anchored);
  - "viable": how many of its leading characters can still be extended to a
    match (the third-party regex package's partial matching; the longest
    such prefix, since a prefix of a viable text is viable).

Patterns are written so that Python's reading equals the dialect tessera
reads them in (ECMAScript for JSON Schema, Python for guided_regex): re.ASCII
makes \\d and \\w ASCII as tessera's are, and no string holds a non-ASCII
space. An ECMAScript pattern's `$` is read as Python's `\\Z` (Python's `$`
also matches before a final newline); a Python pattern with `$` is never
given a string with a newline.

    python3 tools/make_regex_cases.py [OUT]

Needs the regex package (requirements-test.txt). Deterministic.
"""

import json
import random
import re
import sys
from pathlib import Path

import regex

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "regex_cases.json"
MUTANTS_PER_PATTERN = 60
EXTRA_ALPHABET = "aZ09 -_.@\n\"\\\U0001F600\u0436\u00e9:/+"

# (pattern, dialect, search, strings that match)
PATTERNS = [
    (r"^[a-z]+$", "ecmascript", True, ["a", "hello", "zz"]),
    (r"^\d{3}-\d{4}$", "ecmascript", True, ["555-1234", "000-0000"]),
    (r"abc", "ecmascript", True, ["abc", "xxabcyy", "ab abc"]),
    (r"^[A-Z][a-z]*( [A-Z][a-z]*)*$", "ecmascript", True, ["Ada", "Ada Lovelace", "A B C"]),
    (r"^(foo|bar|baz)?qux$", "ecmascript", True, ["qux", "fooqux", "bazqux"]),
    (r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", "ecmascript", True, ["a@b.io", "first.last@example.com"]),
    (r"^\w{2,5}$", "ecmascript", True, ["ab", "a_1", "Zz9_x"]),
    (r"^[\u0400-\u04FF]+$", "ecmascript", True, ["\u0436\u0443\u043a", "\u0416"]),
    (r"^(ab|a)*b?$", "ecmascript", True, ["", "ab", "aab", "abab", "b"]),
    (r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}$", "ecmascript", True, ["deadBEEF-0123"]),
    (r"^x.y$", "ecmascript", True, ["x.y", "xzy", "x\U0001F600y", "x\u00e9y"]),
    (r"^a{2,}b{0,3}$", "ecmascript", True, ["aa", "aaab", "aabbb"]),
    (r"^[^abc]{1,3}$", "ecmascript", True, ["x", "xyz", "\u00e9\u00e9"]),
    (r"^\U0001F600+$".replace("\\U0001F600", "\U0001F600"), "ecmascript", True, ["\U0001F600", "\U0001F600\U0001F600"]),
    (r"^$", "ecmascript", True, [""]),
    (r"^(?:https?://)?[a-z0-9.-]+(?::\d{1,5})?$", "ecmascript", True, ["http://a.b:80", "x.org", "https://q"]),
    (r"start|^end$", "ecmascript", True, ["start", "end", "a start b"]),
    (r"[.]$", "ecmascript", True, [".", "ab."]),
    (r"^\+?[1-9]\d{1,14}$", "ecmascript", True, ["+14155552671", "12"]),
    (r"^[a-c]{2}$|^z+$", "ecmascript", True, ["ab", "zzz"]),
    (r"[a-z]+", "python", False, ["a", "abc"]),
    (r"(yes|no)", "python", False, ["yes", "no"]),
    (r"\d+(\.\d+)?", "python", False, ["1", "12.5", "0.25"]),
    (r"[A-Z]{2}-\d{3}", "python", False, ["AB-123"]),
    (r"((a|b)c)*", "python", False, ["", "ac", "acbc"]),
    (r"\w+@\w+\.com", "python", False, ["me@mail.com"]),
    (r"Answer: (A|B|C|D)", "python", False, ["Answer: A", "Answer: D"]),
    (r".*end", "python", False, ["end", "the end", "\u0436 end"]),
    (r"[]a]+", "python", False, ["]", "a]a"]),
    (r"\s*x\s*", "python", False, ["x", " x\n", "\t x"]),
    (r"(?P<word>[a-z]{1,3})-(?:[0-9]){2}", "python", False, ["ab-12", "z-00"]),
    (r"\"[^\"\\]*\"", "python", False, ['""', '"ab"']),
]


def verdicts(pattern, search, text):
    compiled = re.compile(pattern, re.ASCII)
    match = (compiled.search(text) if search else compiled.fullmatch(text)) is not None
    partial = regex.compile(pattern, regex.ASCII | regex.V0)
    viable = 0
    for n in range(len(text), -1, -1):
        prefix = text[:n]
        found = partial.search(prefix, partial=True) if search else partial.fullmatch(prefix, partial=True)
        if found is not None:
            viable = n
            break
    return match, viable


def mutate(rng, text, alphabet):
    chars = list(text)
    kind = rng.choice(["delete", "insert", "replace", "truncate", "double"])
    if kind == "delete" and chars:
        del chars[rng.randrange(len(chars))]
    elif kind == "insert":
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(alphabet))
    elif kind == "replace" and chars:
        chars[rng.randrange(len(chars))] = rng.choice(alphabet)
    elif kind == "truncate" and chars:
        chars = chars[: rng.randrange(len(chars))]
    else:
        chars = chars + chars
    return "".join(chars)


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    rng = random.Random(20261207)
    cases = []
    for pattern, dialect, search, examples in PATTERNS:
        alphabet = sorted(set("".join(examples)) | set(EXTRA_ALPHABET))
        texts = list(dict.fromkeys(examples))
        for _ in range(MUTANTS_PER_PATTERN):
            texts.append(mutate(rng, rng.choice(examples), alphabet))
        strings = []
        # Every `$` of these patterns is an anchor.
        reference = pattern.replace("$", r"\Z") if dialect == "ecmascript" else pattern
        for text in dict.fromkeys(texts):
            if dialect == "python" and "$" in pattern and "\n" in text:
                continue
            match, viable = verdicts(reference, search, text)
            if text in examples:
                assert match, (pattern, text)
            strings.append({"hex": text.encode().hex(), "match": match, "viable": viable})
        cases.append({"pattern": pattern, "dialect": dialect, "search": search, "strings": strings})
    out.write_text(json.dumps({"generator": "tools/make_regex_cases.py", "cases": cases}, indent=1) + "\n")
    print(f"wrote {out}: {len(cases)} patterns, {sum(len(c['strings']) for c in cases)} strings")


if __name__ == "__main__":
    main()
