"""AWQ 4-bit checkpoints in plain numpy: the independent reference of tessera's loader.

The format (AutoAWQ's GEMM layout, as LMDeploy's `lite auto_awq` writes it), per
linear layer `<name>` of out x in with groups of `g` inputs:
    <name>.qweight  int32   [in, out / 8]
    <name>.qzeros   int32   [in / g, out / 8]
    <name>.scales   float16 [in / g, out]
nibble i (bits 4i..4i+3) of the int32 in column c holds output channel 8c + ORDER[i],
and w[out][in] = (q - zero) * scale.

Only numpy: safetensors files are read and written here by hand (an 8-byte header
length, a JSON header, the raw little-endian data).
"""

import json
import pathlib
import struct

import numpy as np

ORDER = [0, 2, 4, 6, 1, 3, 5, 7]

_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "U8": np.uint8, "F64": np.float64,
           "I64": np.int64}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def register_dtype(name, dtype):
    """Lets the safetensors reader and writer handle another dtype (fp8_reference.py's E4M3)."""
    _DTYPES[name] = dtype
    _NAMES[np.dtype(dtype)] = name


def write_safetensors(path, tensors):
    """tensors: {name: numpy array} -> one .safetensors file."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": _NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    raw = pathlib.Path(path).read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + length + begin:8 + length + end],
                                  dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def pack(values, order=ORDER):
    """values uint [rows, out] (0..15) -> int32 [rows, out / 8] in AWQ's nibble order."""
    rows, out = values.shape
    v = values.astype(np.uint32).reshape(rows, out // 8, 8)
    word = np.zeros((rows, out // 8), dtype=np.uint32)
    for i, channel in enumerate(order):
        word |= v[:, :, channel] << np.uint32(4 * i)
    return word.view(np.int32)


def unpack(packed, order=ORDER):
    """int32 [rows, out / 8] -> uint8 [rows, out]."""
    word = packed.view(np.uint32)
    rows, columns = word.shape
    values = np.zeros((rows, columns, 8), dtype=np.uint8)
    for i, channel in enumerate(order):
        values[:, :, channel] = (word >> np.uint32(4 * i)) & np.uint32(0xF)
    return values.reshape(rows, columns * 8)


def dequantize(qweight, qzeros, scales, group_size):
    """The f32 weight [out, in] of one AWQ linear."""
    q = unpack(qweight).astype(np.float32)               # [in, out]
    z = unpack(qzeros).astype(np.float32)                # [in / g, out]
    s = scales.astype(np.float32)                        # [in / g, out]
    z = np.repeat(z, group_size, axis=0)
    s = np.repeat(s, group_size, axis=0)
    return ((q - z) * s).T.copy()


def random_linear(rng, out, inp, group_size, order=ORDER):
    """A random AWQ linear: (tensors by suffix, its f32 dequantized weight [out, in])."""
    q = rng.integers(0, 16, size=(inp, out))
    z = rng.integers(0, 16, size=(inp // group_size, out))
    s = (rng.uniform(0.5, 1.5, size=(inp // group_size, out)) / np.sqrt(inp) / 4).astype(np.float16)
    tensors = {"qweight": pack(q, order), "qzeros": pack(z, order), "scales": s}
    reference = dequantize(pack(q), pack(z), s, group_size)  # always the true order
    return tensors, reference


# Checkpoint names of each architecture's linear layers, [out, in] by config.
def _linears(arch, c):
    h, nh, nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd, inter = h // nh, c["intermediate_size"]
    if arch == "InternLM2ForCausalLM":
        return {"attention.wqkv": ((nh + 2 * nkv) * hd, h), "attention.wo": (h, nh * hd),
                "feed_forward.w1": (inter, h), "feed_forward.w3": (inter, h), "feed_forward.w2": (h, inter)}
    return {"self_attn.q_proj": (nh * hd, h), "self_attn.k_proj": (nkv * hd, h), "self_attn.v_proj": (nkv * hd, h),
            "self_attn.o_proj": (h, nh * hd), "mlp.gate_proj": (inter, h), "mlp.up_proj": (inter, h),
            "mlp.down_proj": (h, inter)}


def write_random_model(quant_dir, dense_dir, arch, config, make_linear, quantization_config, seed=0):
    """A random 4-bit checkpoint in quant_dir and the same model with numpy-dequantized f32 weights in
    dense_dir. make_linear(rng, out, inp) -> (tensors by suffix, f32 weight [out, in]) draws each linear in
    the 4-bit format; quantization_config goes into quant_dir's config.json."""
    rng = np.random.default_rng(seed)
    names = {"InternLM2ForCausalLM": ("model.tok_embeddings.weight", "output.weight", "attention_norm", "ffn_norm"),
             }.get(arch, ("model.embed_tokens.weight", "lm_head.weight", "input_layernorm", "post_attention_layernorm"))
    h, vocab = config["hidden_size"], config["vocab_size"]
    quant, dense = {}, {}
    shared = {names[0]: rng.normal(0, 1, (vocab, h)).astype(np.float32),
              names[1]: rng.normal(0, 1 / np.sqrt(h), (vocab, h)).astype(np.float32),
              "model.norm.weight": rng.uniform(0.8, 1.2, h).astype(np.float32)}
    for layer in range(config["num_hidden_layers"]):
        base = f"model.layers.{layer}."
        shared[base + names[2] + ".weight"] = rng.uniform(0.8, 1.2, h).astype(np.float32)
        shared[base + names[3] + ".weight"] = rng.uniform(0.8, 1.2, h).astype(np.float32)
        for name, (out, inp) in _linears(arch, config).items():
            tensors, reference = make_linear(rng, out, inp)
            for suffix, t in tensors.items():
                quant[f"{base}{name}.{suffix}"] = t
            dense[f"{base}{name}.weight"] = reference
        if arch == "Qwen2ForCausalLM":  # 16-bit biases on q, k, v
            for name in ("q_proj", "k_proj", "v_proj"):
                out = _linears(arch, config)[f"self_attn.{name}"][0]
                shared[f"{base}self_attn.{name}.bias"] = rng.normal(0, 0.1, out).astype(np.float32)
    for directory, tensors, quantized in ((quant_dir, quant, True), (dense_dir, dense, False)):
        directory = pathlib.Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_safetensors(directory / "model.safetensors", {**shared, **tensors})
        c = dict(config, architectures=[arch], torch_dtype="float32")
        if quantized:
            c["quantization_config"] = quantization_config
        (directory / "config.json").write_text(json.dumps(c, indent=2))


def write_random_pair(awq_dir, dense_dir, arch, config, group_size, seed=0, order=ORDER):
    """A random AWQ checkpoint in awq_dir and the same model with numpy-dequantized f32
    weights in dense_dir. `order` other than ORDER plants a packing bug in awq_dir only."""
    write_random_model(awq_dir, dense_dir, arch, config,
                       lambda rng, out, inp: random_linear(rng, out, inp, group_size, order),
                       {"quant_method": "awq", "bits": 4, "group_size": group_size, "zero_point": True,
                        "version": "gemm"}, seed)
