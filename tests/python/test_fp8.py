"""FP8 checkpoints (fine-grained E4M3 with block scales), against numpy and ml_dtypes
(tools/fp8_reference.py) and the 16-bit models.

- Random FP8 checkpoints of three architectures (InternLM2's fused wqkv split by heads, Qwen2's
  16-bit biases, Llama), with square and oblong blocks and sizes the block does not divide, beside
  the same models with numpy-dequantized f32 weights: tessera's canonical weights are bit-identical,
  and so are its logits. Every finite E4M3 code occurs. A checkpoint whose scale grid is stored
  transposed is caught by the same comparison.
- FP8 exports of golden models stay close to the 16-bit models (the measure and bound below).
- The checkpoint generates and serves with --model-format fp8, as its dequantized twin does, and is
  refused with the other formats' flags; malformed checkpoints get errors naming the problem.
"""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
fp8 = pytest.importorskip("fp8_reference", reason="fp8_reference needs ml_dtypes (requirements-test.txt)")
import awq_reference as ref  # noqa: E402
from test_awq import (SMALL, assert_close_to_the_16_bit_model, assert_generates_as_its_twin,  # noqa: E402,F401
                      assert_loads_as, assert_refused, assert_serves, golden_model, malformed, probe,
                      set_quant, weights, with_demo_tokenizer)

CASES = [("InternLM2ForCausalLM", "internlm2", (32, 32), {}),
         ("Qwen2ForCausalLM", "qwen2", (16, 64), {}),
         ("LlamaForCausalLM", "llama", (64, 64), {"intermediate_size": 96})]  # 96 and 32 rows: partial blocks


@pytest.mark.parametrize("arch, model_type, block, sizes", CASES)
def test_dequantized_weights_and_logits_equal_numpy(probe, tmp_path, arch, model_type, block, sizes):
    quant, dense = tmp_path / "fp8", tmp_path / "dense"
    fp8.write_random_pair(quant, dense, arch, dict(SMALL, model_type=model_type, **sizes), block, seed=13)
    codes = set()
    for name, t in ref.read_safetensors(quant / "model.safetensors").items():
        if t.dtype == fp8.E4M3:
            codes |= set(np.unique(t.view(np.uint8)).tolist())
    assert len(codes) == 254  # every code but the two NaNs: subnormals, zeros of both signs, +-448
    assert_loads_as(probe, quant, dense, tmp_path)


def test_a_transposed_scale_grid_is_caught(probe, tmp_path):
    quant, dense = tmp_path / "fp8", tmp_path / "dense"
    fp8.write_random_pair(quant, dense, "LlamaForCausalLM", dict(SMALL, model_type="llama"), (32, 32), seed=5,
                          transpose_scales=True)
    got, want = weights(probe, quant, tmp_path), weights(probe, dense, tmp_path)
    differing = [n for n in want if not np.array_equal(got[n], want[n])]
    # q_proj and o_proj are 64 x 64: square grids of 2 x 2 blocks.
    assert any(n.endswith(".qkv") for n in differing) and any(n.endswith(".o") for n in differing), differing


# The measure: test_awq's teacher-forced logits comparison (relative error of the centred
# logits, the argmax gap as a fraction of the range, argmax agreement). Measured with blocks
# of 32 x 32 on the five golden models: relative error 0.065-0.076, gap at most 0.024,
# agreement 0.83-0.96 (AWQ's 4-bit groups of 32: 0.19-0.22). The bounds are about 1.5 times
# the largest; another position's logits break them.
MAX_RELATIVE_ERROR = 0.11
MAX_ARGMAX_GAP = 0.04
MIN_ARGMAX_AGREEMENT = {"llama_hd128_gqa2": 0.9}  # its logits are sharp; the others have near-ties


@pytest.mark.parametrize("case", ["llama_hd128_gqa2", "internlm2_gqa2", "qwen2_bias", "qwen3_qk_norm", "phi3_fused"])
def test_fp8_export_of_a_golden_model_stays_close(probe, tmp_path, case):
    source = golden_model(case)
    out = tmp_path / "fp8"
    written = fp8.export(source, out, (32, 32))
    assert any(t.dtype == fp8.E4M3 for t in written.values())
    # Each weight within half an E4M3 step of the original (2^-4 of its magnitude), or one
    # subnormal step (scale * 2^-9) near zero.
    original = ref.read_safetensors(source / "model.safetensors")
    for name, q in written.items():
        if q.dtype != fp8.E4M3:
            continue
        w = original[name].astype(np.float32)
        deq = fp8.dequantize(q, written[name + "_scale_inv"], (32, 32))
        step = np.maximum(np.abs(w) / 16, np.repeat(np.repeat(written[name + "_scale_inv"], 32, 0), 32, 1)[
            :w.shape[0], :w.shape[1]] * 2.0 ** -9)
        assert np.all(np.abs(deq - w) <= step * 1.001), name
    assert_close_to_the_16_bit_model(probe, source, out, tmp_path, case, MAX_RELATIVE_ERROR, MAX_ARGMAX_GAP,
                                     MIN_ARGMAX_AGREEMENT.get(case, 0.0))


def test_fp8_checkpoint_generates_serves_and_format_flags_are_checked(tessera_bin, tmp_path):
    # Random weights with the demo model's tokenizer (its vocabulary of 512).
    quant, dense = tmp_path / "fp8", tmp_path / "dense"
    fp8.write_random_pair(quant, dense, "LlamaForCausalLM", dict(SMALL, vocab_size=512, model_type="llama"),
                          (32, 32), seed=2)
    with_demo_tokenizer(tessera_bin, tmp_path, quant, dense)
    assert_generates_as_its_twin(tessera_bin, quant, dense, "fp8", "FP8")

    assert_serves(tessera_bin, quant, tmp_path / "server.log", "--model-format", "fp8")
    assert "dequantized to 16-bit" in (tmp_path / "server.log").read_text()


@pytest.mark.parametrize("model_format", ["fp8", "awq"])
def test_auto_awq_of_a_quantized_checkpoint_is_refused(tessera_bin, tmp_path, model_format):
    quant, dense = tmp_path / "quant", tmp_path / "dense"
    write = fp8.write_random_pair if model_format == "fp8" else ref.write_random_pair
    write(quant, dense, "LlamaForCausalLM", dict(SMALL, model_type="llama"), (32, 32) if model_format == "fp8" else 32,
          seed=4)
    r = subprocess.run([str(tessera_bin), "lite", "auto_awq", str(quant), str(tmp_path / "out"), "--w-group-size",
                        "32"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"already a quantized ({model_format}) checkpoint" in r.stderr and "16-bit model" in r.stderr, r.stderr
    # Its dequantized twin quantizes.
    r = subprocess.run([str(tessera_bin), "lite", "auto_awq", str(dense), str(tmp_path / "out"), "--w-group-size",
                        "32"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def write_blocks_of_32(quant, dense, arch, config, group, seed):
    """test_awq's malformed() with a valid random FP8 checkpoint (blocks of 32 x 32) to edit."""
    fp8.write_random_pair(quant, dense, arch, config, (32, 32), seed=seed)


def drop(name):
    return lambda config, tensors: tensors.pop(name)


def no_quantization_config(config, tensors):
    del config["quantization_config"]


def fp8_embeddings(config, tensors):
    tensors["model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"].astype(fp8.E4M3)


def scale_cut(config, tensors):
    name = "model.layers.1.mlp.down_proj.weight_scale_inv"
    tensors[name] = np.ascontiguousarray(tensors[name][:, :1])


@pytest.mark.parametrize("edit, kind, messages", [
    (set_quant("fmt", "e5m2"), "unsupported", ["FP8 fmt 'e5m2'", "e4m3"]),
    (set_quant("weight_block_size", [128]), "invalid_argument", ["weight_block_size", "two positive integers"]),
    (set_quant("weight_block_size", [64, 64]), "invalid_argument",
     ["model.layers.0.self_attn.q_proj.weight_scale_inv", "has shape [2, 2], expected [1, 1]", "64 x 64"]),
    (scale_cut, "invalid_argument", ["model.layers.1.mlp.down_proj.weight_scale_inv", "[2, 1]", "expected [2, 4]"]),
    (drop("model.layers.0.mlp.up_proj.weight_scale_inv"), "invalid_argument",
     ["FP8 tensor 'model.layers.0.mlp.up_proj.weight'", "no scale"]),
    (no_quantization_config, "invalid_argument", ["is FP8 (F8_E4M3)", "declares no FP8 quantization_config"]),
    (fp8_embeddings, "invalid_argument", ["'model.embed_tokens.weight' is FP8", "only linear layers"]),
])
def test_malformed_checkpoints_get_clear_errors(probe, tmp_path, edit, kind, messages):
    assert_refused(probe, malformed(tmp_path, edit, write_blocks_of_32), tmp_path, kind, messages)
