"""GPTQ 4-bit checkpoints, against numpy (tools/gptq_reference.py).

- Random GPTQ checkpoints of three architectures (InternLM2's fused wqkv split by heads, Qwen2's
  16-bit biases, Llama), symmetric and asymmetric, in both zero-point conventions ("gptq": stored
  minus one; "gptq_v2"), with and without g_idx, beside the same models with numpy-dequantized f32
  weights: tessera's dequantized canonical weights are bit-identical, and so are its logits.
  A checkpoint written with the other zero-point convention than it declares is caught.
- The checkpoint generates with --model-format gptq and is refused with the other formats' flags.
- Act-order exports (desc_act: inputs dealt to the groups out of order) are dequantized at load: their
  weights and logits equal numpy's too.
- Malformed checkpoints (groups out of order without desc_act, a group past the last) and what is not
  supported (8 bits, group_size -1, another kernel's checkpoint_format) get errors naming the problem.
"""

import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import gptq_reference as ref  # noqa: E402
from test_awq import (SMALL, assert_generates_as_its_twin, assert_loads_as, assert_refused, malformed,  # noqa: E402,F401
                      probe, set_quant, weights, with_demo_tokenizer)

CASES = [("InternLM2ForCausalLM", "internlm2", 32, True, None, True, False),
         ("Qwen2ForCausalLM", "qwen2", 64, True, "gptq", True, False),
         ("LlamaForCausalLM", "llama", 32, False, None, False, False),
         ("LlamaForCausalLM", "llama", 64, False, "gptq_v2", True, False),
         ("InternLM2ForCausalLM", "internlm2", 32, False, "gptq_v2", False, False),
         # act-order (desc_act): inputs dealt to the groups at random, dequantized at load
         ("LlamaForCausalLM", "llama", 32, False, None, True, True),
         ("InternLM2ForCausalLM", "internlm2", 32, True, "gptq_v2", True, True)]


@pytest.mark.parametrize("arch, model_type, group, sym, checkpoint_format, with_g_idx, act_order", CASES)
def test_dequantized_weights_and_logits_equal_numpy(probe, tmp_path, arch, model_type, group, sym,
                                                    checkpoint_format, with_g_idx, act_order):
    gptq, dense = tmp_path / "gptq", tmp_path / "dense"
    ref.write_random_pair(gptq, dense, arch, dict(SMALL, model_type=model_type), group, seed=11, sym=sym,
                          checkpoint_format=checkpoint_format, with_g_idx=with_g_idx, act_order=act_order)
    assert_loads_as(probe, gptq, dense, tmp_path)


@pytest.mark.parametrize("checkpoint_format, wrong_shift", [(None, 0), ("gptq_v2", 1)])
def test_the_other_zero_point_convention_is_caught(probe, tmp_path, checkpoint_format, wrong_shift):
    gptq, dense = tmp_path / "gptq", tmp_path / "dense"
    ref.write_random_pair(gptq, dense, "LlamaForCausalLM", dict(SMALL, model_type="llama"), 32, seed=5, sym=False,
                          checkpoint_format=checkpoint_format, zero_shift=wrong_shift)
    got, want = weights(probe, gptq, tmp_path), weights(probe, dense, tmp_path)
    differing = [n for n in want if not np.array_equal(got[n], want[n])]
    assert any(n.endswith(".qkv") for n in differing) and any(n.endswith(".down") for n in differing), differing


def test_gptq_checkpoint_generates_and_format_flags_are_checked(tessera_bin, tmp_path):
    # Random weights with the demo model's tokenizer (its vocabulary of 512).
    gptq, dense = tmp_path / "gptq", tmp_path / "dense"
    ref.write_random_pair(gptq, dense, "LlamaForCausalLM", dict(SMALL, vocab_size=512, model_type="llama"), 32,
                          seed=2, sym=False)
    with_demo_tokenizer(tessera_bin, tmp_path, gptq, dense)
    assert_generates_as_its_twin(tessera_bin, gptq, dense, "gptq", "GPTQ 4-bit")


def groups_out_of_order(config, tensors):  # without desc_act true
    g_idx = tensors["model.layers.0.mlp.gate_proj.g_idx"].copy()
    g_idx[[3, 40]] = g_idx[[40, 3]]  # inputs 3 and 40 trade groups 0 and 1
    tensors["model.layers.0.mlp.gate_proj.g_idx"] = g_idx


def group_past_the_last(config, tensors):
    g_idx = tensors["model.layers.1.mlp.up_proj.g_idx"].copy()
    g_idx[5] = 2  # 64 inputs: groups 0 and 1
    tensors["model.layers.1.mlp.up_proj.g_idx"] = g_idx


def act_order_without_g_idx(config, tensors):
    config["quantization_config"]["desc_act"] = True
    del tensors["model.layers.1.self_attn.o_proj.g_idx"]


def edit_tensor(name, change):
    def edit(config, tensors):
        tensors[name] = change(tensors[name])
    return edit


@pytest.mark.parametrize("edit, kind, messages", [
    (set_quant("bits", 8), "unsupported", ["GPTQ with 8 bits", "bits: 4"]),
    (set_quant("group_size", -1), "unsupported", ["GPTQ group_size -1", "one group per output channel"]),
    (set_quant("checkpoint_format", "marlin"), "unsupported", ["checkpoint_format 'marlin'", "gptq_v2"]),
    (set_quant("lm_head", True), "unsupported", ["4-bit LM head", "lm_head false"]),
    (groups_out_of_order, "invalid_argument", ["model.layers.0.mlp.gate_proj.g_idx", "puts input 3 in group 1, not 0",
                                               "desc_act is false", "desc_act true"]),
    (group_past_the_last, "invalid_argument", ["model.layers.1.mlp.up_proj.g_idx", "puts input 5 in group 2",
                                               "2 groups"]),
    (act_order_without_g_idx, "invalid_argument", ["desc_act is true", "model.layers.1.self_attn.o_proj.g_idx"]),
    (set_quant("group_size", 64), "invalid_argument", ["model.layers.0.self_attn.q_proj.qzeros", "[1, 8]",
                                                       "[2, 8]", "GPTQ"]),
    (edit_tensor("model.layers.1.mlp.down_proj.qweight", lambda t: np.ascontiguousarray(t[:8])), "invalid_argument",
     ["model.layers.1.mlp.down_proj.qweight", "has shape [8, 64]", "expected [16, 64]"]),
    (edit_tensor("model.layers.0.self_attn.k_proj.g_idx", lambda t: t.astype(np.int64)), "invalid_argument",
     ["model.layers.0.self_attn.k_proj.g_idx", "dtype i64", "int32"]),
])
def test_malformed_checkpoints_get_clear_errors(probe, tmp_path, edit, kind, messages):
    assert_refused(probe, malformed(tmp_path, edit, ref.write_random_pair), tmp_path, kind, messages)
