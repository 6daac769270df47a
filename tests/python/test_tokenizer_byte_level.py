"""tessera's byte-level BPE (Qwen2, Llama 3, GPT-2 style) against the `tokenizers` library.

The Qwen2 vocabulary (vocab.json + merges.txt of the shared test data) is
written as a tokenizer.json the way transformers' Qwen2TokenizerFast does (NFC,
Split with Qwen2's regex, ByteLevel without prefix space, ByteLevel decoder, its
three special tokens); variants swap in Llama 3's regex with ignore_merges and
a BOS template, GPT-2's ByteLevel regex with a prefix space, merges written as
pairs, and added tokens with lstrip/rstrip/normalized flags. tessera (through
`tessera_tokenize`) and `tokenizers.Tokenizer.from_str` load the same file;
ids and decoded text must be identical.
"""

import copy
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")

REPO = Path(__file__).resolve().parents[2]

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")

TEXTS = [
    "Hello world",
    "Hello, World! How are you today?",
    "I'm sure they've said it's fine; we'll see what'd happen. YOU'RE RIGHT, I'LL GO",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { sum += a[i] * 0x1F; }  // loop\n",
    "\u8bb2\u6545\u4e8b\u7ed9\u6211\u542c\u3002\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff01",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01Hello\u4e16\u754c 123\u4e2a",
    "emoji \U0001F600\U0001F436\U0001F3FD family \U0001F468\u200d\U0001F469\u200d\U0001F467 flag \U0001F1E9\U0001F1EA",
    "Numbers: 1234567890 3.14159 -42 1,000,000 2024-01-01 \u0663\u0664\u0665",
    "    four leading spaces",
    "trailing spaces    ",
    "many     inner   spaces\t\ttabs",
    "line one\nline two\n\n\nline five\r\nwindows\r\n",
    "\n\n\n",
    " ",
    "",
    "x",
    "caf\u00e9 vs cafe\u0301 (combining accent, NFC joins it)",
    "\u212b \u00c5 A\u030a \uff21\uff22\uff23 \u2460",
    "\u0416\u0438\u043b\u0438-\u0431\u044b\u043b\u0438 \u0434\u0435\u0434 \u0434\u0430 \u0431\u0430\u0431\u0430",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c \ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text<|endoftext|>",
    "<|im_start|><|im_end|><|im_start|>",
    "unicode\u00a0spaces\u3000and\u2003em\u2009thin",
    "ALL CAPS 'S 'T and mIxEd'Ll",
    "https://example.com/path?q=1&r=two#frag user@example.org",
    "\u00bfQu\u00e9 tal? \u00a1Bien! na\u00efve co\u00f6perate",
    "$$$ %%% ^^^ *** ((( ))) --- ___ +++ ===",
    "a\u0300\u0301\u0302 stacked marks \u1e9b\u0323",
]


def _tool():
    explicit = os.environ.get("TESSERA_TOKENIZE")
    candidate = Path(explicit) if explicit else REPO / "build" / "tests" / "tessera_tokenize"
    if not (candidate.is_file() and os.access(candidate, os.X_OK)):
        pytest.skip("tessera_tokenize is not built (build it or set TESSERA_TOKENIZE)")
    return candidate


def _run(*args, stdin=None):
    result = subprocess.run([str(_tool()), *map(str, args)], input=stdin, capture_output=True, text=True)
    assert result.returncode == 0, f"tessera_tokenize {args[0]} failed: {result.stderr}"
    return result.stdout


def _added(id_, content, special=True, **flags):
    token = {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": not special, "special": special}
    token.update(flags)
    return token


def qwen2_tokenizer_json(vocab, merges):
    """What Qwen2TokenizerFast writes for Qwen2's vocab.json and merges.txt."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added(151643, "<|endoftext|>"), _added(151644, "<|im_start|>"), _added(151645, "<|im_end|>")],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def _variants(base):
    llama3 = copy.deepcopy(base)
    llama3["normalizer"] = None
    llama3["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = LLAMA3_PATTERN
    llama3["model"]["ignore_merges"] = True
    llama3["model"]["merges"] = [m.split(" ") for m in base["model"]["merges"]]  # the newer pair form
    llama3["post_processor"] = {"type": "Sequence", "processors": [
        dict(base["post_processor"]),
        {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                                  {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]}}}]}

    gpt2 = copy.deepcopy(base)
    gpt2["normalizer"] = None
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    gpt2["added_tokens"] += [
        _added(151646, " <tool>", special=False),  # normalized: matched after the normalizer
        _added(151647, "<|strip|>", lstrip=True, rstrip=True),
        _added(151648, "\u4f60\u597d\u554a", special=False, normalized=False),
    ]
    return {"qwen2": base, "llama3_style": llama3, "gpt2_style": gpt2}


@pytest.fixture(scope="module")
def byte_level_dirs(testdata, tmp_path_factory):
    source = testdata / "tokenizers" / "qwen2"
    if not (source / "vocab.json").is_file():
        pytest.skip(f"tokenizers/qwen2/vocab.json not found under {testdata}")
    vocab = json.loads((source / "vocab.json").read_text(encoding="utf-8"))
    merges = [line for line in (source / "merges.txt").read_text(encoding="utf-8").split("\n")
              if line and not line.startswith("#version")]
    root = tmp_path_factory.mktemp("byte_level")
    dirs = {}
    for name, spec in _variants(qwen2_tokenizer_json(vocab, merges)).items():
        dirs[name] = root / name
        dirs[name].mkdir()
        text = json.dumps(spec, ensure_ascii=False)
        (dirs[name] / "tokenizer.json").write_text(text, encoding="utf-8")
        dirs[name] = (dirs[name], tokenizers.Tokenizer.from_str(text))
    return dirs


NAMES = ["qwen2", "llama3_style", "gpt2_style"]


@pytest.mark.parametrize("name", NAMES)
def test_encode_and_decode_match_tokenizers(byte_level_dirs, name):
    directory, reference = byte_level_dirs[name]
    texts = TEXTS + ["say <|strip|>  now", "  <tool> and <tool>", "\u4f60\u597d\u554a\u4f60\u597d"]
    ours = json.loads(_run("batch", directory, stdin=json.dumps(texts)))
    for text, result in zip(texts, ours):
        expected = reference.encode(text)
        assert result["ids"] == expected.ids, f"encode({text!r})"
        assert result["ids_plain"] == reference.encode(text, add_special_tokens=False).ids, f"plain {text!r}"
        assert result["decoded"] == reference.decode(expected.ids), f"decode(encode({text!r}))"
        assert result["decoded_special"] == reference.decode(expected.ids, skip_special_tokens=False), \
            f"decode(encode({text!r}), keep special)"


def test_qwen2_round_trip_is_exact(byte_level_dirs):
    directory, _ = byte_level_dirs["qwen2"]
    plain = [t for t in TEXTS if "<|" not in t and "\u0301" not in t and "\u030a" not in t and "\u212b" not in t
             and "\u0323" not in t]
    for text, result in zip(plain, json.loads(_run("batch", directory, stdin=json.dumps(plain)))):
        assert result["decoded"] == text


@pytest.mark.parametrize("name", ["qwen2", "gpt2_style"])
def test_decode_of_arbitrary_ids_matches_tokenizers(byte_level_dirs, name):
    """Random ids split multi-byte characters anywhere; invalid UTF-8 becomes U+FFFD as in HF."""
    directory, reference = byte_level_dirs[name]
    size = reference.get_vocab_size()
    rng = random.Random(99)
    single_bytes = list(range(256))  # the 256 single-byte pieces are the first ids
    lists = [[], [151644], [151643, 151645]]
    lists += [[rng.randrange(size) for _ in range(rng.randrange(1, 25))] for _ in range(80)]
    lists += [[rng.choice(single_bytes) if rng.random() < 0.7 else rng.randrange(size)
               for _ in range(rng.randrange(1, 25))] for _ in range(80)]
    ours = json.loads(_run("decode-batch", directory, stdin=json.dumps(lists)))
    for ids, result in zip(lists, ours):
        assert result["skip"] == reference.decode(ids), f"decode({ids})"
        assert result["keep"] == reference.decode(ids, skip_special_tokens=False), f"decode({ids}, keep)"
