"""tessera's tokenizer.model support against PyPI's `sentencepiece` package.

The real InternLM2 and Llama 2 tokenizer.model files of the shared test data
are loaded by tessera (through the `tessera_tokenize` test program, which
links Debian's libsentencepiece) and by the `sentencepiece` Python package.
The added-token overlay transformers applies is reproduced here in a few lines:
added tokens are cut out of the raw text (leftmost, longest first) and every
span between them is encoded by SentencePiece on its own; BOS goes first.
Decoding follows LlamaTokenizerFast's decoder ("▁" to " ", byte pieces joined,
an invalid byte run one U+FFFD per byte, the first space dropped when the model
adds a dummy prefix); for text that encodes and decodes cleanly it must also
equal SentencePiece's own decode.
"""

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

spm = pytest.importorskip("sentencepiece")

REPO = Path(__file__).resolve().parents[2]

INTERNLM2_ADDED = {
    0: "<unk>", 1: "<s>", 2: "</s>", 92538: "<|plugin|>", 92539: "<|interpreter|>", 92540: "<|action_end|>",
    92541: "<|action_start|>", 92542: "<|im_end|>", 92543: "<|im_start|>",
}

TEXTS = [
    "Hello world",
    "Hello  world   with  runs of spaces",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "line one\nline two\n\n\tindented\r\n",
    "\u8bb2\u6545\u4e8b\u7ed9\u6211\u542c\u3002\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff01",  # 讲故事给我听。今天天气很好！
    "emoji \U0001F600\U0001F436\U0001F3FD and a flag \U0001F1E9\U0001F1EA",
    "def f(x):\n    return x ** 2  # square\n",
    "if (a && b) { return c[i] >= 0x1F; }",
    "The year 2024 had 366 days; 3.14159 ~ pi; 1,000,000.",
    "I'm sure they've said it's 'fine', haven't they?",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber \u0416\u0438\u043b\u0438-\u0431\u044b\u043b\u0438",
    "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n",
    "<s>text after bos</s>",
    "a<s>b</s>c <unk> d",
    "<|im_start|><|im_end|>",
    "mixed \u4e2d\u6587 and English \u548c\u6570\u5b57 123",
    "",
    " ",
    "\n",
    "x",
    "\u2581already \u2581 metaspace",
    "\u3000\u00a0unicode spaces\u2003here",
    "\uff21\uff22\uff23 full width \u2460 circled",
]


def _tool():
    explicit = os.environ.get("TESSERA_TOKENIZE")
    candidates = [Path(explicit)] if explicit else [REPO / "build" / "tests" / "tessera_tokenize"]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("tessera_tokenize is not built (build it or set TESSERA_TOKENIZE)")


def _run(*args, stdin=None):
    result = subprocess.run([str(_tool()), *map(str, args)], input=stdin, capture_output=True, text=True)
    assert result.returncode == 0, f"tessera_tokenize {args[0]} failed: {result.stderr}"
    return result.stdout


class Reference:
    """transformers' slow-tokenizer overlay over a SentencePiece model, written plainly."""

    def __init__(self, model_file, added):
        self.sp = spm.SentencePieceProcessor(model_file=str(model_file))
        self.added = dict(added)
        for i in range(self.sp.get_piece_size()):
            if (self.sp.is_control(i) or self.sp.is_unknown(i)) and i not in self.added:
                self.added[i] = self.sp.id_to_piece(i)
        self.by_content = {content: i for i, content in self.added.items()}
        first = self.sp.encode("a", out_type=str)
        self.dummy_prefix = bool(first) and first[0].startswith("\u2581")

    def encode(self, text, bos=True):
        ids = [self.sp.bos_id()] if bos else []
        contents = sorted(self.by_content, key=len, reverse=True)
        pos = start = 0
        while pos < len(text):
            match = next((c for c in contents if text.startswith(c, pos)), None)
            if match is None:
                pos += 1
                continue
            if pos > start:
                ids += self.sp.encode(text[start:pos])
            ids.append(self.by_content[match])
            pos = start = pos + len(match)
        if start < len(text):
            ids += self.sp.encode(text[start:])
        return ids

    def decode(self, ids, skip_special):
        pieces = []
        for i in ids:
            if i in self.added:
                if not skip_special:
                    pieces.append(("text", self.added[i]))
            elif 0 <= i < self.sp.get_piece_size():
                if self.sp.is_byte(i):
                    pieces.append(("byte", int(self.sp.id_to_piece(i)[3:5], 16)))
                else:
                    pieces.append(("text", self.sp.id_to_piece(i).replace("\u2581", " ")))
        out, run = [], []

        def flush():
            if run:
                try:
                    out.append(bytes(run).decode("utf-8"))
                except UnicodeDecodeError:
                    out.append("\ufffd" * len(run))
                run.clear()

        for kind, value in pieces:
            if kind == "byte":
                run.append(value)
            else:
                flush()
                out.append(value)
        flush()
        text = "".join(out)
        if self.dummy_prefix and text.startswith(" "):
            text = text[1:]
        return text


@pytest.fixture(scope="module")
def models(testdata, tmp_path_factory):
    """name -> (directory for tessera, Reference)."""
    root = tmp_path_factory.mktemp("sentencepiece")
    result = {}
    for name, added in [("internlm2", INTERNLM2_ADDED), ("llama2", {})]:
        model = testdata / "tokenizers" / name / "tokenizer.model"
        if not model.is_file():
            continue
        directory = root / name
        directory.mkdir()
        (directory / "tokenizer.model").write_bytes(model.read_bytes())
        if added:
            config = {
                "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                "added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                                  "single_word": False, "special": True} for i, c in added.items()},
            }
            (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        result[name] = (directory, Reference(model, added))
    return result


def _model(models, name):
    if name not in models:
        pytest.skip(f"tokenizers/{name}/tokenizer.model not in the shared test data")
    return models[name]


@pytest.mark.parametrize("name", ["internlm2", "llama2"])
def test_encode_matches_sentencepiece(models, name):
    directory, reference = _model(models, name)
    ours = json.loads(_run("batch", directory, stdin=json.dumps(TEXTS)))
    for text, result in zip(TEXTS, ours):
        assert result["ids"] == reference.encode(text), f"encode({text!r})"
        assert result["ids_plain"] == reference.encode(text, bos=False), f"encode({text!r}, plain)"
        assert result["decoded"] == reference.decode(result["ids"], True), f"decode(encode({text!r}))"
        assert result["decoded_special"] == reference.decode(result["ids"], False), f"decode keep ({text!r})"
        plain = [i for i in result["ids"] if i not in reference.added]
        assert result["decoded"] == reference.sp.decode(plain), f"SentencePiece's own decode of {text!r}"


@pytest.mark.parametrize("name", ["internlm2", "llama2"])
def test_decode_of_arbitrary_ids(models, name):
    directory, reference = _model(models, name)
    size = reference.sp.get_piece_size()
    rng = random.Random(7)
    lists = [[], [1], [3 + 0xE8, 3 + 0xAE], [3 + 0xE8, 3 + 0xAE, 3 + 0xB2], [3 + 0xC3, 3 + 0xA9, 3 + 0xFF]]
    lists += [[rng.randrange(size) for _ in range(rng.randrange(1, 30))] for _ in range(80)]
    lists += [[rng.choice([rng.randrange(3, 259), rng.randrange(size)]) for _ in range(rng.randrange(1, 30))]
              for _ in range(80)]
    ours = json.loads(_run("decode-batch", directory, stdin=json.dumps(lists)))
    for ids, result in zip(lists, ours):
        assert result["skip"] == reference.decode(ids, True), f"decode({ids})"
        assert result["keep"] == reference.decode(ids, False), f"decode({ids}, keep special)"


def test_internlm2_chat_tokens_and_config(models):
    directory, reference = _model(models, "internlm2")
    ids = json.loads(_run("encode", directory, "<|im_start|>user\nhi<|im_end|>"))
    assert ids[:2] == [1, 92543] and ids[-1] == 92542
    assert _run("decode", directory, "--keep-special", 92543, 92542) == "<|im_start|><|im_end|>"
