#!/usr/bin/env python3
"""Golden token ids for the real tokenizers, from the reference libraries.

Writes into OUT_DIR (tests/fixtures/tokenizers):
  corpus.json       the corpus: named texts (English, Chinese, code, emoji,
                    whitespace runs, digits, special tokens inside text, the
                    empty string, ...) and the recipe of the large input
  <name>.json       per tokenizer (internlm2, llama2, qwen2): for every corpus
                    text the ids of encode(text, add_special=True) and the
                    reference decode(ids, skip_special=True); for the large
                    input its length, FNV-1a 64 hash, id count and the ids as
                    base64 of unsigned LEB128 varints

The oracles:
  internlm2, llama2  PyPI `sentencepiece` on tokenizer.model, with the overlay
                     transformers' slow tokenizer applies: added tokens
                     (InternLM2's chat tokens; the model's control and unknown
                     pieces) are cut out of the text, leftmost and longest
                     first, every span between them is encoded on its own, BOS
                     goes first. Decoding drops the added tokens and lets
                     SentencePiece decode the rest.
  qwen2              PyPI `tokenizers` on a tokenizer.json built from vocab.json
                     and merges.txt with Qwen2's NFC normalizer, split regex,
                     byte-level pre-tokenizer and decoder and its three special
                     tokens, as transformers' Qwen2TokenizerFast builds it.

The large input is regenerated, not stored: a 64-bit LCG (Knuth's MMIX
constants, seed 20240726) picks corpus texts and separators until the text
reaches LARGE_BYTES; tests/text/tokenizer_golden_test.cc rebuilds it the same
way and checks length and hash before comparing ids. large_text() is the one
definition; tools/bench_tokenizer.py uses it for 1 MB of mixed text.

Run from the repository root with the test requirements installed:
    python3 tools/make_tokenizer_golden.py [--testdata ../shared/testdata] [--out tests/fixtures/tokenizers]
"""

import argparse
import base64
import json
import sys
from pathlib import Path

LARGE_BYTES = 100 * 1024
LARGE_SEED = 20240726
SEPARATORS = [" ", "\n", "", "  ", "\n\n", "\t"]

CORPUS = [
    ("english", "Hello world! The quick brown fox jumps over the lazy dog."),
    ("english_sentences", "Once upon a time, there was a little girl named Lily. She loved to play outside "
                          "in the park. I'm sure they've said it's 'fine', haven't they?"),
    ("chinese_story", "\u8bb2\u4e00\u4e2a\u4e09\u56fd\u6545\u4e8b"),  # 讲一个三国故事
    ("chinese_long", "\u8bdd\u8bf4\u5929\u4e0b\u5927\u52bf\uff0c\u5206\u4e45\u5fc5\u5408\uff0c\u5408\u4e45\u5fc5"
                     "\u5206\u3002\u5218\u5907\u3001\u5173\u7fbd\u3001\u5f20\u98de\u6843\u56ed\u4e09\u7ed3\u4e49"
                     "\u3002"),  # 话说天下大势，分久必合，合久必分。刘备、关羽、张飞桃园三结义。
    ("code_python", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)  # slow\n"),
    ("code_c", "int main(void) {\n\tfor (int i = 0; i < 10; ++i) { printf(\"%d\\n\", i << 2); }\n\treturn 0;\n}\n"),
    ("emoji", "emoji \U0001F600\U0001F436\U0001F3FD and a flag \U0001F1E9\U0001F1EA, family "
              "\U0001F468\u200D\U0001F469\u200D\U0001F467 \u2764\uFE0F"),
    ("whitespace_runs", "  two leading,  inner   runs    of spaces     and trailing   "),
    ("whitespace_mixed", "line one\nline two\n\n\n\tindented\r\n  \t \n\u3000ideographic\u00a0nbsp\u2003em"),
    ("digits", "The year 2024 had 366 days; 3.14159 ~ pi; 1,000,000 and 0x1F 007 1234567890123"),
    ("special_inside_text", "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n"),
    ("special_llama", "<s>text after bos</s> and a<s>b</s>c <unk> d"),
    ("special_qwen", "before<|endoftext|>after <|im_start|>system\nBe brief.<|im_end|>"),
    ("special_adjacent", "<|im_start|><|im_end|><s></s>"),
    ("mixed_languages", "mixed \u4e2d\u6587 and English \u548c\u6570\u5b57 123, caf\u00e9 na\u00efve "
                        "\u0416\u0438\u043b\u0438-\u0431\u044b\u043b\u0438 \ud55c\uad6d\uc5b4 \u65e5\u672c\u8a9e"),
    ("full_width", "\uff21\uff22\uff23 full width \u2460 circled \u00bd \u2126 \u212b"),
    ("empty", ""),
    ("space", " "),
    ("newline", "\n"),
    ("single_char", "x"),
    ("metaspace_char", "\u2581already \u2581 metaspace"),
    ("punctuation", "She said: \"Why?\" (and then left...) -- [ok] {fine} #1 @home 100% & more!"),
]


def lcg(state):
    return (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)


def large_text(size=LARGE_BYTES, seed=LARGE_SEED):
    """Corpus texts and separators picked by the LCG until the UTF-8 text holds at least `size` bytes."""
    parts, length, state = [], 0, seed
    texts = [text for _, text in CORPUS]
    while length < size:
        state = lcg(state)
        text = texts[(state >> 33) % len(texts)]
        state = lcg(state)
        separator = SEPARATORS[(state >> 33) % len(SEPARATORS)]
        parts.append(text + separator)
        length += len((text + separator).encode("utf-8"))
    return "".join(parts)


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) % (1 << 64)
    return h


def varint_base64(ids):
    out = bytearray()
    for i in ids:
        assert i >= 0
        while True:
            byte = i & 0x7F
            i >>= 7
            out.append(byte | (0x80 if i else 0))
            if not i:
                break
    return base64.b64encode(bytes(out)).decode("ascii")


INTERNLM2_ADDED = {
    0: "<unk>", 1: "<s>", 2: "</s>", 92538: "<|plugin|>", 92539: "<|interpreter|>", 92540: "<|action_end|>",
    92541: "<|action_start|>", 92542: "<|im_end|>", 92543: "<|im_start|>",
}

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


class SentencePieceReference:
    """transformers' slow-tokenizer overlay over PyPI sentencepiece."""

    def __init__(self, model_file, added):
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=str(model_file))
        self.added = dict(added)
        for i in range(self.sp.get_piece_size()):
            if (self.sp.is_control(i) or self.sp.is_unknown(i)) and i not in self.added:
                self.added[i] = self.sp.id_to_piece(i)
        self.by_content = {content: i for i, content in self.added.items()}
        self.contents = sorted(self.by_content, key=len, reverse=True)

    def encode(self, text):
        ids = [self.sp.bos_id()]
        pos = start = 0
        while pos < len(text):
            match = next((c for c in self.contents if text.startswith(c, pos)), None)
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

    def decode(self, ids):
        return self.sp.decode([i for i in ids if i not in self.added])

    def version(self):
        import sentencepiece as spm

        return f"sentencepiece {spm.__version__}"


def qwen2_tokenizer_json(directory):
    """The tokenizer.json Qwen2TokenizerFast builds from vocab.json and merges.txt, as a dict."""
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    merges = [line for line in (directory / "merges.txt").read_text(encoding="utf-8").split("\n")
              if line and not line.startswith("#version")]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}

    def added(i, content):
        return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True}

    return {
        "version": "1.0",
        "added_tokens": [added(151643, "<|endoftext|>"), added(151644, "<|im_start|>"),
                         added(151645, "<|im_end|>")],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }


class Qwen2Reference:
    """PyPI tokenizers on Qwen2's vocab.json + merges.txt, as Qwen2TokenizerFast builds it."""

    def __init__(self, directory):
        import tokenizers

        self.tokenizer = tokenizers.Tokenizer.from_str(json.dumps(qwen2_tokenizer_json(directory)))

    def encode(self, text):
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def decode(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def version(self):
        import tokenizers

        return f"tokenizers {tokenizers.__version__}"


def references(testdata):
    """name -> reference, for the tokenizers present in the test data."""
    found = {}
    root = testdata / "tokenizers"
    if (root / "internlm2" / "tokenizer.model").is_file():
        found["internlm2"] = SentencePieceReference(root / "internlm2" / "tokenizer.model", INTERNLM2_ADDED)
    if (root / "llama2" / "tokenizer.model").is_file():
        found["llama2"] = SentencePieceReference(root / "llama2" / "tokenizer.model", {})
    if (root / "qwen2" / "vocab.json").is_file() and (root / "qwen2" / "merges.txt").is_file():
        found["qwen2"] = Qwen2Reference(root / "qwen2")
    return found


def golden(name, reference):
    cases = []
    for case, text in CORPUS:
        ids = reference.encode(text)
        cases.append({"name": case, "ids": ids, "decoded": reference.decode(ids)})
    text = large_text()
    ids = reference.encode(text)
    data = text.encode("utf-8")
    return {
        "tokenizer": name,
        "reference": reference.version(),
        "add_special": True,
        "cases": cases,
        "large": {"bytes": len(data), "fnv1a64": f"{fnv1a64(data):016x}", "count": len(ids),
                  "ids_leb128_base64": varint_base64(ids), "decoded_equals_text": reference.decode(ids) == text},
    }


def main():
    repo = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--testdata", type=Path, default=repo.parent / "shared" / "testdata")
    parser.add_argument("--out", type=Path, default=repo / "tests" / "fixtures" / "tokenizers")
    args = parser.parse_args()

    found = references(args.testdata)
    if not found:
        sys.exit(f"no tokenizers under {args.testdata / 'tokenizers'}")
    args.out.mkdir(parents=True, exist_ok=True)
    corpus = {"texts": [{"name": n, "text": t} for n, t in CORPUS],
              "large": {"bytes_at_least": LARGE_BYTES, "seed": LARGE_SEED, "separators": SEPARATORS,
                        "lcg": "state = state * 6364136223846793005 + 1442695040888963407 (mod 2^64); "
                               "each part: text = texts[(next >> 33) % len], separator = separators[(next >> 33) % len]"}}
    (args.out / "corpus.json").write_text(json.dumps(corpus, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for name, reference in found.items():
        path = args.out / f"{name}.json"
        document = golden(name, reference)
        # One case per line keeps the files small and their diffs readable.
        lines = [json.dumps({k: v for k, v in document.items() if k != "cases"}, ensure_ascii=False)[:-1]
                 + ', "cases": [']
        lines += [json.dumps(case, ensure_ascii=False, separators=(",", ":")) + ","
                  for case in document["cases"]]
        lines[-1] = lines[-1][:-1]
        lines.append("]}")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{path}: {len(document['cases'])} texts, large input {document['large']['count']} ids "
              f"({reference.version()})")


if __name__ == "__main__":
    main()
