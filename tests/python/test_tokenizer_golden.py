"""The committed golden ids (tests/fixtures/tokenizers) are what the reference libraries give now.

tools/make_tokenizer_golden.py wrote them from PyPI sentencepiece and
tokenizers; tests/text/tokenizer_golden_test.cc compares tessera with them.
This recomputes every file in memory and compares, so a changed corpus or a
reference library that disagrees with the committed files is noticed.
Skips when the libraries or the shared test data are absent.
"""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("tokenizers")

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "tokenizers"
sys.path.insert(0, str(REPO / "tools"))
import make_tokenizer_golden as golden  # noqa: E402


@pytest.fixture(scope="module")
def references(testdata):
    found = golden.references(testdata)
    if not found:
        pytest.skip(f"no tokenizers under {testdata / 'tokenizers'}")
    return found


def test_corpus_file_is_the_scripts_corpus():
    corpus = json.loads((FIXTURES / "corpus.json").read_text(encoding="utf-8"))
    assert [(t["name"], t["text"]) for t in corpus["texts"]] == golden.CORPUS
    text = golden.large_text()
    assert len(text.encode("utf-8")) >= golden.LARGE_BYTES


@pytest.mark.parametrize("name", ["internlm2", "llama2", "qwen2"])
def test_golden_file_is_current(references, name):
    if name not in references:
        pytest.skip(f"{name} not in the shared test data")
    committed = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    fresh = golden.golden(name, references[name])
    assert [c["name"] for c in committed["cases"]] == [c["name"] for c in fresh["cases"]]
    for ours, theirs in zip(committed["cases"], fresh["cases"]):
        assert ours == theirs, f"{name}: {ours['name']} (rerun tools/make_tokenizer_golden.py)"
    for key in ("bytes", "fnv1a64", "count", "ids_leb128_base64", "decoded_equals_text"):
        assert committed["large"][key] == fresh["large"][key], f"{name}: large input {key}"
