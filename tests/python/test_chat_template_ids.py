"""A chat prompt from messages to ids, tessera against the reference libraries.

The InternLM2 conversation (user / assistant / user, add_generation_prompt) is
rendered with the real InternLM2.5 chat template and encoded with the real
InternLM2 tokenizer.model and the chat models' added tokens: by jinja2 (set up
as transformers sets it up) and PyPI's sentencepiece with transformers'
added-token overlay, and by tessera from a model directory holding
tokenizer.model and a tokenizer_config.json with the template and the added
tokens (through the tessera_chat_template and tessera_tokenize test programs).
Text and ids must be identical.
"""

import json
import subprocess

import pytest

from test_chat_templates import chat_tool, reference_environment  # noqa: F401 - chat_tool is a fixture
from test_tokenizer_sentencepiece import INTERNLM2_ADDED, Reference, _run

pytest.importorskip("sentencepiece")

TEMPLATE = "chat_templates/internlm-internlm2_5-7b-chat.jinja"
MODEL = "tokenizers/internlm2/tokenizer.model"
MESSAGES = [
    {"role": "user", "content": "Hello! What's your name?"},
    {"role": "assistant", "content": "My name is InternLM2!"},
    {"role": "user", "content": "Nice to meet you InternLM2!"},
]


@pytest.fixture(scope="module")
def internlm2_chat_dir(testdata, tmp_path_factory):
    if not (testdata / TEMPLATE).is_file() or not (testdata / MODEL).is_file():
        pytest.skip(f"{TEMPLATE} or {MODEL} not in the shared test data")
    directory = tmp_path_factory.mktemp("internlm2_chat")
    (directory / "tokenizer.model").write_bytes((testdata / MODEL).read_bytes())
    config = {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
        "chat_template": (testdata / TEMPLATE).read_text(encoding="utf-8"),
        "added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for i, c in INTERNLM2_ADDED.items()},
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def test_internlm2_conversation_ids(testdata, internlm2_chat_dir, chat_tool):  # noqa: F811
    source = (testdata / TEMPLATE).read_text(encoding="utf-8")
    expected_text = reference_environment().from_string(source).render(
        messages=MESSAGES, add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    reference = Reference(testdata / MODEL, INTERNLM2_ADDED)
    expected_ids = reference.encode(expected_text, bos=False)  # the template wrote <s>
    assert expected_ids[:4] == [1, 92543, 1008, 364]

    request = {"model_dir": str(internlm2_chat_dir), "messages": MESSAGES, "add_generation_prompt": True,
               "bos_token": "<s>", "eos_token": "</s>"}
    result = subprocess.run([str(chat_tool)], input=json.dumps(request).encode(), capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    text = result.stdout.decode()
    assert text == expected_text

    ids = json.loads(_run("encode", internlm2_chat_dir, text, "--no-special"))
    assert ids == expected_ids
    assert _run("decode", internlm2_chat_dir, "--keep-special", *ids) == expected_text
