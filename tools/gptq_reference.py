"""GPTQ 4-bit checkpoints in plain numpy: the independent reference of tessera's GPTQ loader.

The format (AutoGPTQ's and GPTQModel's, as the published *-GPTQ-Int4 models store it), per
linear layer `<name>` of out x in with groups of `g` inputs:
    <name>.qweight  int32   [in / 8, out]      nibble i (bits 4i..4i+3) of row r: input 8r + i
    <name>.qzeros   int32   [in / g, out / 8]  nibble j of column c: output 8c + j
    <name>.scales   float16 [in / g, out]
    <name>.g_idx    int32   [in]               input i's group, i // g unless act-order
and w[out][in] = (q - zero) * scale, where checkpoint_format "gptq" (the default) stores
each zero minus one (mod 16) and "gptq_v2" the zero itself.
"""

import numpy as np

from awq_reference import write_random_model


def pack_rows(values):
    """uint [rows, cols] (0..15) -> int32 [rows / 8, cols]: 8 consecutive rows a word."""
    rows, cols = values.shape
    v = values.astype(np.uint32).reshape(rows // 8, 8, cols)
    word = np.zeros((rows // 8, cols), dtype=np.uint32)
    for i in range(8):
        word |= v[:, i, :] << np.uint32(4 * i)
    return word.view(np.int32)


def pack_columns(values):
    """uint [rows, cols] (0..15) -> int32 [rows, cols / 8]: 8 consecutive columns a word."""
    return np.ascontiguousarray(pack_rows(np.ascontiguousarray(values.T)).T)


def unpack_rows(packed):
    word = packed.view(np.uint32)
    rows8, cols = word.shape
    values = np.zeros((rows8, 8, cols), dtype=np.uint8)
    for i in range(8):
        values[:, i, :] = (word >> np.uint32(4 * i)) & np.uint32(0xF)
    return values.reshape(rows8 * 8, cols)


def unpack_columns(packed):
    return np.ascontiguousarray(unpack_rows(np.ascontiguousarray(packed.T)).T)


def dequantize(qweight, qzeros, scales, g_idx, checkpoint_format="gptq"):
    """The f32 weight [out, in] of one GPTQ linear, as AutoGPTQ's reference layer computes it."""
    q = unpack_rows(qweight).astype(np.int32)                    # [in, out]
    z = unpack_columns(qzeros).astype(np.int32)                  # [in / g, out]
    if checkpoint_format == "gptq":
        z = (z + 1) & 0xF
    s = scales.astype(np.float32)
    return ((q - z[g_idx]).astype(np.float32) * s[g_idx]).T.copy()


def random_linear(rng, out, inp, group_size, sym=True, checkpoint_format="gptq", zero_shift=None, act_order=False):
    """A random GPTQ linear: (tensors by suffix, its f32 dequantized weight [out, in]).
    `zero_shift` other than the format's (1 for "gptq", 0 for "gptq_v2") plants a bug. With `act_order` the
    inputs are dealt to the groups at random (each group still has group_size of them), as desc_act exports do."""
    q = rng.integers(0, 16, size=(inp, out))
    z = np.full((inp // group_size, out), 8) if sym else rng.integers(0, 16, size=(inp // group_size, out))
    shift = (1 if checkpoint_format == "gptq" else 0) if zero_shift is None else zero_shift
    s = (rng.uniform(0.5, 1.5, size=(inp // group_size, out)) / np.sqrt(inp) / 4).astype(np.float16)
    g_idx = (np.arange(inp) // group_size).astype(np.int32)
    if act_order:
        g_idx = rng.permutation(g_idx).astype(np.int32)
    tensors = {"qweight": pack_rows(q), "qzeros": pack_columns((z - shift) & 0xF), "scales": s, "g_idx": g_idx}
    reference = ((q - z[g_idx]).astype(np.float32) * s.astype(np.float32)[g_idx]).T.copy()
    return tensors, reference


def write_random_pair(gptq_dir, dense_dir, arch, config, group_size, seed=0, sym=True, checkpoint_format=None,
                      with_g_idx=True, zero_shift=None, act_order=False):
    """A random GPTQ checkpoint in gptq_dir and the same model with numpy-dequantized f32 weights in dense_dir.
    checkpoint_format None writes no such key (AutoGPTQ's configs), which means "gptq"."""
    fmt = checkpoint_format or "gptq"

    def make_linear(rng, out, inp):
        tensors, reference = random_linear(rng, out, inp, group_size, sym, fmt, zero_shift, act_order)
        assert zero_shift is not None or np.array_equal(
            reference, dequantize(tensors["qweight"], tensors["qzeros"], tensors["scales"], tensors["g_idx"], fmt))
        if not with_g_idx:
            del tensors["g_idx"]
        return tensors, reference

    quantization_config = {"quant_method": "gptq", "bits": 4, "group_size": group_size, "desc_act": act_order,
                           "sym": sym, "damp_percent": 0.01, "static_groups": False, "true_sequential": True}
    if checkpoint_format:
        quantization_config["checkpoint_format"] = checkpoint_format
    write_random_model(gptq_dir, dense_dir, arch, config, make_linear, quantization_config, seed)
