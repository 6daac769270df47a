#!/usr/bin/env python3
"""Encode throughput of tessera's tokenizers beside the Python reference libraries.

Builds 1 MB of mixed text (English, Chinese, code, emoji, whitespace, digits,
special tokens; make_tokenizer_golden.large_text with a 1 MB target), the
model directories of the InternLM2, Llama 2 and Qwen2 tokenizers of the shared
test data, and times on the same machine, in the same run:
  tessera    tessera_bench_tokenizer (encode with add_special, best of N)
  reference  PyPI sentencepiece with transformers' added-token overlay
             (InternLM2, Llama 2), PyPI tokenizers (Qwen2), best of N
Both encode the whole text in one call; the id counts are printed so a
disagreement is visible.

    python3 tools/bench_tokenizer.py [--bin build/tests/tessera_bench_tokenizer] [--repeat 5]
"""

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import make_tokenizer_golden as golden  # noqa: E402


class FastOverlay:
    """The added-token overlay of make_tokenizer_golden.SentencePieceReference, split by one regex."""

    def __init__(self, reference):
        self.reference = reference
        self.pattern = re.compile("|".join(re.escape(c) for c in reference.contents))

    def encode(self, text):
        sp, ids, start = self.reference.sp, [self.reference.sp.bos_id()], 0
        for match in self.pattern.finditer(text):
            if match.start() > start:
                ids += sp.encode(text[start:match.start()])
            ids.append(self.reference.by_content[match.group()])
            start = match.end()
        if start < len(text):
            ids += sp.encode(text[start:])
        return ids


def model_dirs(testdata, root):
    dirs = {}
    tokenizers = testdata / "tokenizers"
    for name in ("internlm2", "llama2"):
        model = tokenizers / name / "tokenizer.model"
        if not model.is_file():
            continue
        directory = root / name
        directory.mkdir()
        (directory / "tokenizer.model").write_bytes(model.read_bytes())
        if name == "internlm2":
            config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                      "added_tokens_decoder": {str(i): {"content": c, "special": True, "normalized": False}
                                               for i, c in golden.INTERNLM2_ADDED.items()}}
            (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        dirs[name] = directory
    if (tokenizers / "qwen2" / "vocab.json").is_file():
        directory = root / "qwen2"
        directory.mkdir()
        (directory / "tokenizer.json").write_text(json.dumps(golden.qwen2_tokenizer_json(tokenizers / "qwen2")),
                                                  encoding="utf-8")
        dirs["qwen2"] = directory
    return dirs


def time_best(function, repeat):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", type=Path, default=REPO / "build" / "tests" / "tessera_bench_tokenizer")
    parser.add_argument("--testdata", type=Path, default=REPO.parent / "shared" / "testdata")
    parser.add_argument("--bytes", type=int, default=1 << 20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    text = golden.large_text(args.bytes)
    data = text.encode("utf-8")
    references = golden.references(args.testdata)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dirs = model_dirs(args.testdata, root)
        if not dirs:
            sys.exit(f"no tokenizers under {args.testdata / 'tokenizers'}")
        (root / "text.txt").write_bytes(data)
        result = subprocess.run([str(args.bin), str(root / "text.txt"), "--repeat", str(args.repeat),
                                 *[f"{name}={d}" for name, d in dirs.items()]],
                                capture_output=True, text=True, check=True)
    ours = {row["name"]: row for row in map(json.loads, result.stdout.splitlines())}

    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}; "
          f"text: {len(data)} bytes of mixed text; best of {args.repeat}")
    print(f"{'tokenizer':<10} {'tessera MB/s':>13} {'ids':>8}   {'reference':<22} {'MB/s':>8} {'ids':>8}")
    for name in dirs:
        reference = references[name]
        encode = FastOverlay(reference).encode if hasattr(reference, "sp") else reference.encode
        seconds, ids = time_best(lambda: encode(text), args.repeat)
        print(f"{name:<10} {ours[name]['mb_per_s']:>13.2f} {ours[name]['ids']:>8}   {reference.version():<22} "
              f"{len(data) / 1e6 / seconds:>8.2f} {len(ids):>8}")


if __name__ == "__main__":
    main()
