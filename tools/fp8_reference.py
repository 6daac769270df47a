"""FP8 checkpoints in numpy and ml_dtypes: the independent reference of tessera's FP8 loader.

The format (Hugging Face's fine-grained FP8, as the published *-FP8 models store it), per
linear layer `<name>` of out x in with quantization_config.weight_block_size [R, C]:
    <name>.weight            F8_E4M3  [out, in]
    <name>.weight_scale_inv  float32  [ceil(out / R), ceil(in / C)]
and w[o][i] = e4m3(weight[o][i]) * weight_scale_inv[o // R][i // C]. The E4M3 values
are ml_dtypes' float8_e4m3fn (the type JAX and the exporters use), not tessera's decoder.
"""

import json
import pathlib

import ml_dtypes
import numpy as np

import awq_reference as ref
from awq_reference import write_random_model

E4M3 = ml_dtypes.float8_e4m3fn
ref.register_dtype("F8_E4M3", E4M3)
MAX = float(ml_dtypes.finfo(E4M3).max)  # 448


def dequantize(weight, scale_inv, block):
    """The f32 weight [out, in] of one FP8 linear."""
    rows, cols = block
    out, inp = weight.shape
    s = np.repeat(np.repeat(scale_inv.astype(np.float32), rows, axis=0), cols, axis=1)[:out, :inp]
    return weight.astype(np.float32) * s


def quantize(w, block):
    """The exporters' rule: each block scaled so its largest magnitude is E4M3's largest,
    rounded to nearest. Returns (E4M3 weight, f32 scale_inv)."""
    rows, cols = block
    out, inp = w.shape
    scale = np.zeros((-(-out // rows), -(-inp // cols)), dtype=np.float32)
    q = np.zeros(w.shape, dtype=E4M3)
    for r in range(scale.shape[0]):
        for c in range(scale.shape[1]):
            part = w[r * rows:(r + 1) * rows, c * cols:(c + 1) * cols].astype(np.float32)
            s = max(float(np.abs(part).max()), 1e-12) / MAX
            q[r * rows:(r + 1) * rows, c * cols:(c + 1) * cols] = (part / s).astype(E4M3)
            scale[r, c] = s
    return q, scale


def random_linear(rng, out, inp, block, transpose_scales=False):
    """A random FP8 linear: (tensors by suffix, its f32 dequantized weight [out, in]). Its codes are
    drawn uniformly from every finite E4M3 value (subnormals, both signs, 448). `transpose_scales`
    stores a square scale grid transposed (so its shape stays right): a planted bug."""
    codes = rng.integers(0, 256, size=(out, inp)).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # the two NaN codes
    weight = codes.view(E4M3)
    grid = (-(-out // block[0]), -(-inp // block[1]))
    scale_inv = (rng.uniform(0.5, 1.5, size=grid) * 2 / MAX / np.sqrt(inp)).astype(np.float32)
    reference = dequantize(weight, scale_inv, block)
    stored = np.ascontiguousarray(scale_inv.T) if transpose_scales and grid[0] == grid[1] else scale_inv
    return {"weight": weight, "weight_scale_inv": stored}, reference


def quantization_config(block):
    return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(block)}


def write_random_pair(fp8_dir, dense_dir, arch, config, block, seed=0, transpose_scales=False):
    """A random FP8 checkpoint in fp8_dir and the same model with numpy-dequantized f32 weights in dense_dir."""
    write_random_model(fp8_dir, dense_dir, arch, config,
                       lambda rng, out, inp: random_linear(rng, out, inp, block, transpose_scales),
                       quantization_config(block), seed)


def export(source_dir, out_dir, block, linears=(".q_proj.", ".k_proj.", ".v_proj.", ".o_proj.", ".gate_proj.",
                                                 ".up_proj.", ".down_proj.", ".wqkv.", ".wo.", ".w1.", ".w2.",
                                                 ".w3.", ".qkv_proj.", ".gate_up_proj.")):
    """An FP8 export of a 16-bit safetensors model: every linear layer's weight quantized by `quantize`,
    the rest (embeddings, norms, biases, the LM head) kept; the other files copied."""
    source_dir, out_dir = pathlib.Path(source_dir), pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, array in ref.read_safetensors(source_dir / "model.safetensors").items():
        if name.endswith(".weight") and array.ndim == 2 and any(part in name for part in linears):
            q, scale_inv = quantize(array, block)
            tensors[name], tensors[name + "_scale_inv"] = q, scale_inv
        else:
            tensors[name] = array
    ref.write_safetensors(out_dir / "model.safetensors", tensors)
    for f in source_dir.iterdir():
        if f.name not in ("model.safetensors", "config.json") and f.is_file():
            (out_dir / f.name).write_bytes(f.read_bytes())
    config = json.loads((source_dir / "config.json").read_text())
    config["quantization_config"] = quantization_config(block)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return tensors
