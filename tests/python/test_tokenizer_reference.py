"""tessera's tokenizer against Hugging Face's `tokenizers` library.

The tokenizer.json files tessera writes (stories260K's llama2.c tok512.bin
converted, and the built-in demo tokenizer) are loaded by both tessera (through
the `tessera_tokenize` test program) and `tokenizers.Tokenizer.from_file`; the
ids from encode and the text from decode must be identical. Variants of the
file in the other forms tessera reads (a Metaspace pre-tokenizer instead of the
Prepend/Replace normalizer) are checked the same way.

Skips when `tokenizers` is not installed, when the `tessera_tokenize` binary
is not built (set TESSERA_TOKENIZE to its path) or when the test data is
absent (set TESSERA_TESTDATA).
"""

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")

REPO = Path(__file__).resolve().parents[2]
TOK512 = "models/stories260K/tok512.bin"

TEXTS = [
    "Hello world",
    "Once upon a time, there was a little girl named Lily.",
    "She said: \"Why?\" (and then left...) -- [ok] {fine} #1 @home 100% & more!",
    "The year 2024 had 366 days; 3.14159 is close to pi.",
    "\u8bb2\u6545\u4e8b\u7ed9\u6211\u542c",  # 讲故事给我听
    "\u8bb2",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber",
    "emoji \U0001F600 and \U0001F436\U0001F3FD!",
    "  two leading spaces",
    " one leading space",
    "trailing spaces   ",
    "many     inner   spaces",
    "line one\nline two\n\nline four\n",
    "tabs\tand\r\nwindows newlines",
    " ",
    "\n",
    "",
    "x",
    "a<s>b</s>c <unk> d",
    "The end.",
    "\u0416\u0438\u043b\u0438-\u0431\u044b\u043b\u0438 \u0434\u0435\u0434 \u0434\u0430 \u0431\u0430\u0431\u0430",  # Жили-были дед да баба
]


def _tool():
    explicit = os.environ.get("TESSERA_TOKENIZE")
    candidates = [Path(explicit)] if explicit else [
        REPO / "build" / "tests" / "tessera_tokenize",
        REPO / "build" / "tessera_tokenize",
        REPO / "build" / "bin" / "tessera_tokenize",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("tessera_tokenize is not built (build it or set TESSERA_TOKENIZE)")


def _testdata():
    return Path(os.environ.get("TESSERA_TESTDATA", REPO.parent / "shared" / "testdata"))


def _run(*args, stdin=None):
    result = subprocess.run([str(_tool()), *map(str, args)], input=stdin, capture_output=True, text=True)
    assert result.returncode == 0, f"tessera_tokenize {' '.join(map(str, args))} failed: {result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory):
    """name -> directory holding a tokenizer.json written by tessera (or a variant of one)."""
    root = tmp_path_factory.mktemp("tokenizers")
    dirs = {}
    tok512 = _testdata() / TOK512
    if tok512.is_file():
        dirs["stories260K"] = root / "stories260K"
        _run("convert-llama2c", tok512, dirs["stories260K"], 512, 512)
    dirs["demo"] = root / "demo"
    _run("demo", dirs["demo"])

    # transformers' LlamaConverter (legacy=False) form: Metaspace, no normalizer.
    source = json.loads((dirs["demo"] / "tokenizer.json").read_text(encoding="utf-8"))
    for name, pre_tokenizer, decoder in [
        ("metaspace_first", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
         source["decoder"]),
        ("metaspace_split", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
         {"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                                            "split": True}, {"type": "ByteFallback"}]}),
    ]:
        variant = dict(source, normalizer=None, pre_tokenizer=pre_tokenizer, decoder=decoder)
        dirs[name] = root / name
        dirs[name].mkdir()
        (dirs[name] / "tokenizer.json").write_text(json.dumps(variant, ensure_ascii=False), encoding="utf-8")
    return dirs


NAMES = ["stories260K", "demo", "metaspace_first", "metaspace_split"]


def _reference(dirs, name):
    if name not in dirs:
        pytest.skip(f"test data {TOK512} not found under {_testdata()} (set TESSERA_TESTDATA)")
    return dirs[name], tokenizers.Tokenizer.from_file(str(dirs[name] / "tokenizer.json"))


@pytest.mark.parametrize("name", NAMES)
def test_encode_and_decode_match_tokenizers(tokenizer_dirs, name):
    directory, reference = _reference(tokenizer_dirs, name)
    ours = json.loads(_run("batch", directory, stdin=json.dumps(TEXTS)))
    assert len(ours) == len(TEXTS)
    for text, result in zip(TEXTS, ours):
        expected = reference.encode(text)
        assert result["ids"] == expected.ids, f"encode({text!r})"
        assert result["ids_plain"] == reference.encode(text, add_special_tokens=False).ids, f"encode({text!r}, plain)"
        assert result["decoded"] == reference.decode(expected.ids), f"decode(encode({text!r}))"
        assert result["decoded_special"] == reference.decode(expected.ids, skip_special_tokens=False), \
            f"decode(encode({text!r}), keep special)"


@pytest.mark.parametrize("name", ["stories260K", "demo"])
def test_decode_inverts_encode(tokenizer_dirs, name):
    directory, _ = _reference(tokenizer_dirs, name)
    plain = [text for text in TEXTS if "<" not in text]
    for text, result in zip(plain, json.loads(_run("batch", directory, stdin=json.dumps(plain)))):
        assert result["decoded"] == text


@pytest.mark.parametrize("name", NAMES)
def test_decode_of_arbitrary_ids_matches_tokenizers(tokenizer_dirs, name):
    """Random id lists: split UTF-8 byte runs, special tokens anywhere, out-of-range ids."""
    directory, reference = _reference(tokenizer_dirs, name)
    size = reference.get_vocab_size()
    rng = random.Random(1234)
    lists = [[], [0, 1, 2], [3 + 0xE8, 3 + 0xAE], [3 + 0xE8, 3 + 0xAE, 3 + 0xB2], [3 + 0xE8, 300, 3 + 0xAE, 3 + 0xB2]]
    lists += [[rng.randrange(size) for _ in range(rng.randrange(1, 24))] for _ in range(60)]
    lists += [[rng.randrange(259, size) for _ in range(rng.randrange(1, 24))] for _ in range(40)]
    ours = json.loads(_run("decode-batch", directory, stdin=json.dumps(lists)))
    for ids, result in zip(lists, ours):
        assert result["skip"] == reference.decode(ids), f"decode({ids})"
        assert result["keep"] == reference.decode(ids, skip_special_tokens=False), f"decode({ids}, keep special)"


def test_encode_and_decode_commands(tokenizer_dirs):
    directory, reference = _reference(tokenizer_dirs, "demo")
    text = "Lily saw the moon."
    ids = json.loads(_run("encode", directory, text))
    assert ids == reference.encode(text).ids
    assert json.loads(_run("encode", directory, text, "--no-special")) == ids[1:]
    assert _run("decode", directory, *ids) == text
    assert _run("decode", directory, "--keep-special", *ids) == reference.decode(ids, skip_special_tokens=False)
