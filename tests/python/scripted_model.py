"""A scripted model for server tests: the demo model whose greedy answer to any prompt is a given
sequence of pieces.

The demo model's tokenizer gets the answer's pieces (and any other tokens a template needs)
added as whole tokens; the weights make greedy decoding write the answer token by token:
every layer is zero (the residual stream passes through unchanged), each token of the answer
embeds to a direction of its own, and the LM head maps each direction to the next token of
the answer (every other token to the first). Pieces must be distinct.
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np

from test_server_helpers import Server, make_demo_model, serving

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import awq_reference as ref  # noqa: E402


def scripted_model(binary, root, answer, others, chat_template=None):
    """The demo model whose greedy answer to any prompt is `answer`'s pieces in order."""
    demo = make_demo_model(binary, root / "demo")
    out = root / "model"
    shutil.copytree(demo, out)
    tokenizer = json.loads((out / "tokenizer.json").read_text())
    base = len(tokenizer["model"]["vocab"])
    # Pieces the tokenizer has as added tokens already (the demo's "</s>") keep their ids.
    ids = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    added = 0
    for piece, special in answer + others:
        if piece in ids:
            continue
        ids[piece] = base + added
        added += 1
        tokenizer["added_tokens"].append({"id": ids[piece], "content": piece, "single_word": False, "lstrip": False,
                                          "rstrip": False, "normalized": False, "special": special})
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    if chat_template is not None:
        config = json.loads((out / "tokenizer_config.json").read_text())
        config["chat_template"] = chat_template
        (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False))

    config = json.loads((out / "config.json").read_text())
    vocab, hidden = base + added, config["hidden_size"]
    config["vocab_size"] = vocab
    (out / "config.json").write_text(json.dumps(config))
    tensors = ref.read_safetensors(out / "model.safetensors")
    tensors = {name: (np.ones_like(t) if t.ndim == 1 else np.zeros_like(t))
               for name, t in tensors.items() if "embed_tokens" not in name and "lm_head" not in name}
    # Direction 0: any token outside the answer; direction i + 1: the answer's piece i.
    chain = [ids[piece] for piece, _ in answer]
    assert len(chain) < hidden
    embed = np.zeros((vocab, hidden), np.float32)
    embed[:, 0] = 1.0
    head = np.zeros((vocab, hidden), np.float32)
    head[chain[0], 0] = 1.0
    for i, token in enumerate(chain):
        embed[token] = 0.0
        embed[token, i + 1] = 1.0
        if i + 1 < len(chain):
            head[chain[i + 1], i + 1] = 1.0
    tensors["model.embed_tokens.weight"] = embed
    tensors["lm_head.weight"] = head
    ref.write_safetensors(out / "model.safetensors", tensors)
    return out


def serve_scripted(binary, root, answer, others, template_file):
    """A server over the scripted model with `template_file` as its chat template (a module fixture's body)."""
    model = scripted_model(binary, root, answer, others, chat_template=template_file.read_text())
    yield from serving(Server(binary, model, root / "server.log"))
