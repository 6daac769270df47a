#!/usr/bin/env python3
"""Make golden fixtures for tessera's CPU backend tests, using PyTorch + transformers as the oracle.

    python3 tools/make_golden.py OUT_DIR [--cases NAME ...]
        [--stories PATH/stories260K.bin [--stories-tokenizer PATH/tok512.bin] [--stories-out FILE]]

A. For every case in CASES: a tiny random 2-layer model (seeded), saved as a Hugging Face
   checkpoint in OUT_DIR/<case>/ (config.json, model.safetensors, generation_config.json), and
   OUT_DIR/<case>/expected.json with what transformers computes in float32 on the CPU:
   prompt_ids (11 seeded ids in [3, vocab)), logits ([11][vocab], 6 significant digits),
   greedy_ids (12 ids, each the argmax of a full forward over the sequence so far: no
   generate(), no KV cache, no EOS stop), greedy_margins (top1 - top2 per step), rope_inv_freq /
   rope_attention_scaling (transformers' RoPE table at the prompt), dtype (of the saved
   weights), greedy_full_recompute and a note. Weights: linear ~ N(0, 1/in_features),
   embeddings ~ N(0, 0.25), norms 1 + 0.1*N(0,1), biases 0.2*N(0,1), so logits are O(1).
   internlm2_* cases: a Llama model is the oracle, saved in InternLM2's layout (fused wqkv).

B. --stories: an independent transformers forward of llama2.c's stories260K.bin (parsed here;
   wq/wk permuted from llama2.c's interleaved RoPE pairs to HF's rotate_half halves): 200
   greedy ids after BOS, and the text if tok512.bin is given or lies beside the .bin.

Needs: python3, torch (CPU is enough), safetensors and a recent transformers (5.x; an older 4.x
may stop at a self-check: Qwen2 ignoring head_dim, YaRN using max_position_embeddings).
Regenerate the committed fixtures (from the repository root; see tools/README.md):
    python3 tools/make_golden.py tests/fixtures/golden \\
        --stories ../shared/testdata/models/stories260K/stories260K.bin \\
        --stories-out tests/fixtures/stories260k_greedy.json
"""

import argparse
import copy
import inspect
import json
import math
import os
import random
import re
import struct
import sys
from array import array

try:  # the llama2.c parsers below work without torch; everything else needs it
    import torch
except ImportError:
    torch = None

PROMPT_LEN, NEW_TOKENS, STORIES_TOKENS = 11, 12, 200
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
GENERATION_CONFIG = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
STORIES_FIRST_SENTENCE = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."

# Shapes: hidden H, heads nh, kv heads nkv, head_dim hd, intermediate I, vocab V.
# Where nh * hd != H the config carries an explicit head_dim (as Qwen3 / Mistral-Nemo do).
ROPE_BASE = dict(hidden=64, nh=2, nkv=1, hd=64, inter=128, vocab=256, tie=True)
GQA4 = dict(hidden=64, nh=4, nkv=1, hd=64, inter=128, vocab=256, tie=False)
CASES = [
    dict(name="llama_hd64_mha", seed=101, hidden=128, nh=2, nkv=2, hd=64, inter=224, vocab=256, tie=False),
    dict(name="llama_hd128_gqa2", seed=102, hidden=64, nh=4, nkv=2, hd=128, inter=128, vocab=300, tie=True),
    dict(name="llama_hd64_gqa4", seed=103, **GQA4),
    dict(name="llama_hd64_gqa8", seed=104, hidden=64, nh=8, nkv=1, hd=64, inter=128, vocab=320, tie=False),
    dict(name="llama_rope_linear", seed=105, **ROPE_BASE,
         rope_scaling={"rope_type": "linear", "type": "linear", "factor": 2.0}),
    dict(name="llama_rope_dynamic", seed=106, **ROPE_BASE, max_pos=8,
         rope_scaling={"rope_type": "dynamic", "type": "dynamic", "factor": 2.0}),
    # original_max_position_embeddings 64 (not 16): with theta 5e5 and hd 64 the shortest wavelength
    # is 2*pi, so 16/high_freq_factor = 4 would leave no high-frequency band; 64 gives all three.
    dict(name="llama_rope_llama3", seed=107, **ROPE_BASE, max_pos=512, theta=500000.0,
         rope_scaling={"rope_type": "llama3", "type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    dict(name="llama_rope_yarn", seed=108, **ROPE_BASE, max_pos=64,
         rope_scaling={"rope_type": "yarn", "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
    dict(name="llama_bf16", seed=109, **GQA4, save_dtype="bfloat16"),
    dict(name="llama_f16", seed=110, **GQA4, save_dtype="float16"),
    dict(name="qwen2_bias", seed=111, arch="qwen2", hidden=64, nh=4, nkv=2, hd=64, inter=128, vocab=256, tie=False),
    # head_dim 32 with hidden 64 and 4 heads: Qwen3's head_dim is given, not hidden / heads.
    dict(name="qwen3_qk_norm", seed=115, arch="qwen3", hidden=64, nh=4, nkv=2, hd=32, inter=128, vocab=256,
         tie=False, theta=1000000.0),
    # Phi-3: fused qkv_proj and gate_up_proj, and a sliding window as Phi-3-mini-4k has (2047 there).
    dict(name="phi3_fused", seed=116, arch="phi3", hidden=64, nh=4, nkv=2, hd=16, inter=128, vocab=256, tie=False,
         sliding_window=6),
    dict(name="mistral_gqa4", seed=112, arch="mistral", hidden=64, nh=4, nkv=1, hd=64, inter=128, vocab=256,
         tie=False, sliding_window=6),
    dict(name="internlm2_gqa2", seed=113, layout="internlm2", hidden=128, nh=4, nkv=2, hd=32, inter=128,
         vocab=256, tie=False, theta=1000000.0),
    dict(name="internlm2_mha", seed=114, layout="internlm2", hidden=128, nh=2, nkv=2, hd=64, inter=128,
         vocab=256, tie=False, theta=1000000.0),
]


def sig6(x):
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {x}")
    return float(f"{x:.6g}")


def write_json(path, obj):
    """JSON with one top-level key per line and one logits row per line (diffable, compact)."""
    parts = []
    for key, value in obj.items():
        if key == "logits":
            body = "[\n" + ",\n".join("    " + json.dumps(row, separators=(",", ":")) for row in value) + "\n  ]"
        else:
            body = json.dumps(value, separators=(",", ":"))
        parts.append(f"  {json.dumps(key)}: {body}")
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(parts) + "\n}\n")


# ---------------------------------------------------------------- A. transformers cases

def hf_classes(arch):  # (config class, model class)
    import transformers
    prefix = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral", "phi3": "Phi3"}[arch]
    return getattr(transformers, prefix + "Config"), getattr(transformers, prefix + "ForCausalLM")


def make_config(arch, case, **extra):
    kw = dict(vocab_size=case["vocab"], hidden_size=case["hidden"], intermediate_size=case["inter"],
              num_hidden_layers=2, num_attention_heads=case["nh"], num_key_value_heads=case["nkv"],
              head_dim=case["hd"], hidden_act="silu", max_position_embeddings=case.get("max_pos", 64),
              rms_norm_eps=1e-5, rope_theta=case.get("theta", 10000.0), tie_word_embeddings=case["tie"],
              bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, attn_implementation="eager")
    if case.get("rope_scaling"):
        kw["rope_scaling"] = copy.deepcopy(case["rope_scaling"])  # transformers mutates it
    if arch in ("qwen2", "qwen3"):
        kw["use_sliding_window"] = False
    if arch in ("mistral", "phi3"):
        kw["sliding_window"] = case["sliding_window"]
    kw.update(extra)
    config = hf_classes(arch)[0](**kw)
    config._attn_implementation = "eager"
    return config


def build_model(arch, config):
    model = hf_classes(arch)[1](config).to(torch.float32).eval()
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    attn = model.model.layers[0].self_attn
    want = (config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim)
    if hasattr(attn, "qkv_proj"):  # Phi-3: q | k | v in one projection
        q_rows, k_rows = config.num_attention_heads * attn.head_dim, config.num_key_value_heads * attn.head_dim
        assert attn.qkv_proj.weight.shape[0] == sum(want) + want[1], attn.qkv_proj.weight.shape
    else:
        q_rows, k_rows = attn.q_proj.weight.shape[0], attn.k_proj.weight.shape[0]
    if (q_rows, k_rows) != want:  # e.g. an old Qwen2 that ignores config.head_dim
        raise SystemExit(f"this transformers ignores head_dim for {arch}: q/k rows {(q_rows, k_rows)} != {want}")
    return model


def randomize(model, seed):
    """Deterministic weights, independent of transformers' own initialisation."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied lm_head appears once, as embed_tokens
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith(".bias"):
                p.copy_(0.2 * noise)
            elif p.ndim == 1:  # RMSNorm weights
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[1]))


def greedy_full_forwards(model, prompt, new_tokens):
    """Logits of the prompt forward, then argmax of the last position of a full forward per step."""
    ids, margins, prompt_logits, inv_freq, att_scale = list(prompt), [], None, None, None
    with torch.no_grad():
        for step in range(new_tokens):
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
            if step == 0:
                prompt_logits = logits
                rot = getattr(model.model, "rotary_emb", None)  # after the forward: dynamic RoPE updates it
                if rot is not None and hasattr(rot, "inv_freq"):
                    inv_freq = [float(f"{x:.9g}") for x in rot.inv_freq.float().tolist()]
                    att_scale = float(getattr(rot, "attention_scaling", 1.0))
            last = logits[-1]
            top2 = torch.topk(last, 2).values
            ids.append(int(torch.argmax(last)))
            margins.append(sig6(float(top2[0] - top2[1])))
    return prompt_logits, ids[len(prompt):], margins, inv_freq, att_scale


def check_saved_tensors(model, path, tied):
    from safetensors.torch import load_file
    disk, state = load_file(path), model.state_dict()
    for name, t in disk.items():
        assert name in state and torch.equal(t.float(), state[name].float()), f"{path}: {name} differs"
    missing = set(state) - set(disk) - ({"lm_head.weight"} if tied else set())
    assert not missing, f"{path}: tensors not saved: {sorted(missing)}"


def fix_config_json(out_dir, dtype_name):
    """Keep the keys tessera's loader reads whatever transformers wrote (5.x: rope_parameters, dtype)."""
    path = os.path.join(out_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    if "rope_theta" not in cfg and "rope_theta" in rp:
        cfg["rope_theta"] = rp["rope_theta"]
    if cfg.get("rope_scaling") is None and rp.get("rope_type", rp.get("type", "default")) != "default":
        cfg["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
    rs = cfg.setdefault("rope_scaling", None)
    if isinstance(rs, dict):  # write both spellings of the type
        rs.setdefault("rope_type", rs.get("type"))
        rs.setdefault("type", rs["rope_type"])
    cfg["torch_dtype"] = dtype_name
    if "dtype" in cfg:
        cfg["dtype"] = dtype_name
    write_config(path, cfg)
    if not os.path.exists(os.path.join(out_dir, "generation_config.json")):
        write_config(os.path.join(out_dir, "generation_config.json"), GENERATION_CONFIG)


def write_config(path, cfg):
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def pack_internlm2_wqkv(q, k, v, nh, nkv, hd):
    """InternLM2 wqkv rows: nkv groups of [nh/nkv query heads, 1 key head, 1 value head], hd rows each."""
    hidden = q.shape[1]
    groups = [q.view(nkv, nh // nkv, hd, hidden), k.view(nkv, 1, hd, hidden), v.view(nkv, 1, hd, hidden)]
    packed = torch.cat(groups, dim=1).reshape(-1, hidden)
    # Unpack as modeling_internlm2 does ("b q (h gs d) -> b q h gs d") and check the round trip.
    g = packed.view(nkv, nh // nkv + 2, hd, hidden)
    assert torch.equal(g[:, :-2].reshape(-1, hidden), q) and torch.equal(g[:, -2].reshape(-1, hidden), k)
    assert torch.equal(g[:, -1].reshape(-1, hidden), v)
    return packed.contiguous()


INTERNLM2_NAMES = {"input_layernorm": "attention_norm", "self_attn.o_proj": "attention.wo",
                   "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "feed_forward.w1",
                   "mlp.up_proj": "feed_forward.w3", "mlp.down_proj": "feed_forward.w2"}


def save_internlm2(model, case, out_dir):
    from safetensors.torch import save_file
    sd, nh, nkv, hd = model.state_dict(), case["nh"], case["nkv"], case["hd"]
    assert case["hd"] * nh == case["hidden"], "InternLM2 has no head_dim key: hidden must be nh*hd"
    t = {"model.tok_embeddings.weight": sd["model.embed_tokens.weight"], "model.norm.weight": sd["model.norm.weight"],
         "output.weight": sd["lm_head.weight"]}
    for i in range(model.config.num_hidden_layers):
        p = f"model.layers.{i}."
        for hf_name, ilm_name in INTERNLM2_NAMES.items():
            t[p + ilm_name + ".weight"] = sd[p + hf_name + ".weight"]
        t[p + "attention.wqkv.weight"] = pack_internlm2_wqkv(
            *(sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv"), nh, nkv, hd)
    save_file({k: v.detach().clone().contiguous() for k, v in t.items()},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    c = model.config
    cfg = {"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2",
           "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config",
                        "AutoModel": "modeling_internlm2.InternLM2ForCausalLM",
                        "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"},
           "hidden_size": c.hidden_size, "num_attention_heads": nh, "num_key_value_heads": nkv,
           "num_hidden_layers": c.num_hidden_layers, "intermediate_size": c.intermediate_size,
           "vocab_size": c.vocab_size, "rms_norm_eps": c.rms_norm_eps, "rope_theta": case["theta"],
           "rope_scaling": None, "max_position_embeddings": c.max_position_embeddings, "hidden_act": "silu",
           "bias": False, "tie_word_embeddings": False, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
           "pad_token_id": PAD_ID, "torch_dtype": "float32"}
    write_config(os.path.join(out_dir, "config.json"), cfg)
    write_config(os.path.join(out_dir, "generation_config.json"), GENERATION_CONFIG)


def reference_rope(case):
    """Our own reading of each RoPE variant -> (inv_freq per pair, cos/sin scale); must match transformers."""
    hd, theta, rs = case["hd"], case.get("theta", 10000.0), case.get("rope_scaling") or {}
    kind, factor = rs.get("rope_type", "default"), rs.get("factor", 1.0)
    if kind == "dynamic":  # the base grows with the longest position of the forward (here the prompt)
        theta *= (factor * PROMPT_LEN / case["max_pos"] - (factor - 1)) ** (hd / (hd - 2))
    inv = [theta ** (-i / hd) for i in range(0, hd, 2)]
    if kind == "linear":
        return [f / factor for f in inv], 1.0
    if kind == "llama3":
        old, lff, hff = rs["original_max_position_embeddings"], rs["low_freq_factor"], rs["high_freq_factor"]
        def one(f):
            wl = 2 * math.pi / f
            if wl < old / hff:
                return f
            if wl > old / lff:
                return f / factor
            smooth = (old / wl - lff) / (hff - lff)
            return (1 - smooth) * f / factor + smooth * f
        return [one(f) for f in inv], 1.0
    if kind == "yarn":  # beta_fast 32, beta_slow 1, truncated correction range on the ORIGINAL length
        old = rs["original_max_position_embeddings"]
        corr = lambda rotations: hd * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), hd - 1)
        hi += 0.001 if hi == lo else 0
        ramp = [min(max((i - lo) / (hi - lo), 0.0), 1.0) for i in range(hd // 2)]  # 1: interpolate (f/factor)
        return [f / factor * r + f * (1 - r) for f, r in zip(inv, ramp)], 0.1 * math.log(factor) + 1.0
    return inv, 1.0


def llama3_bands(theta, hd, rs):
    """Which of transformers' llama3 bands (high: kept, mid: smoothed, low: / factor) the pairs fall in."""
    high_wl = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
    low_wl = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
    wls = [2 * math.pi * theta ** (i / hd) for i in range(0, hd, 2)]
    return {"high": sum(w < high_wl for w in wls), "mid": sum(high_wl <= w <= low_wl for w in wls),
            "low": sum(w > low_wl for w in wls)}


def check_sliding_window(arch, model, case, prompt):
    """The window (Mistral's, Phi-3's) must mask keys j <= i - W in eager mode: compare with the same weights,
    no window."""
    full = build_model(arch, make_config(arch, case, sliding_window=None))
    full.load_state_dict(model.state_dict())
    w = case["sliding_window"]
    with torch.no_grad():
        a = model(input_ids=torch.tensor([prompt]), use_cache=False).logits[0]
        b = full(input_ids=torch.tensor([prompt]), use_cache=False).logits[0]
    diff = (a - b).abs().amax(dim=-1)
    assert float(diff[:w].max()) < 1e-5, f"positions < {w} should not see the window: {diff.tolist()}"
    assert float(diff[w:].min()) > 1e-4, f"the sliding window was not applied (or W+1 keys): {diff.tolist()}"


def make_case(case, out_root):
    name, arch, layout = case["name"], case.get("arch", "llama"), case.get("layout", "hf")
    out_dir = os.path.join(out_root, name)
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(case["seed"])
    config = make_config(arch, case)
    model = build_model(arch, config)
    randomize(model, case["seed"])
    if case["tie"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"
    rng = random.Random(case["seed"])
    prompt = [rng.randrange(3, case["vocab"]) for _ in range(PROMPT_LEN)]
    save_dtype = case.get("save_dtype", "float32")
    notes = ["Random weights; expected values from transformers in float32 on the CPU with eager attention.",
             f"greedy_ids: argmax of a full forward over prompt + ids so far, {NEW_TOKENS} steps; "
             f"EOS ({EOS_ID}) does not stop it."]

    if layout == "internlm2":
        save_internlm2(model, case, out_dir)
        notes.append("Oracle is LlamaForCausalLM with the same weights; the checkpoint is in InternLM2 layout "
                     "(wqkv packed as nkv groups of [nh/nkv q heads, k head, v head]).")
    else:
        # Buffers (RoPE's inv_freq) are not weights: keep them in float32, as a float32
        # model built from the saved checkpoint would have them.
        buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
        model.to(getattr(torch, save_dtype))
        params = inspect.signature(model.save_pretrained).parameters  # 5.x may drop safe_serialization
        model.save_pretrained(out_dir, **({"safe_serialization": True} if "safe_serialization" in params else {}))
        model.to(torch.float32)  # bf16/f16 -> f32 is exact: the oracle uses the rounded weights
        with torch.no_grad():
            for n, b in model.named_buffers():
                b.copy_(buffers[n])
        check_saved_tensors(model, os.path.join(out_dir, "model.safetensors"), case["tie"])
        fix_config_json(out_dir, save_dtype)
    if save_dtype != "float32":
        notes.append(f"Weights saved in {save_dtype}; logits computed in float32 from those rounded weights "
                     "(upcast), so a float32 compute path should match closely.")

    logits, greedy, margins, inv_freq, att_scale = greedy_full_forwards(model, prompt, NEW_TOKENS)
    rs = case.get("rope_scaling") or {}
    ref_inv, ref_scale = reference_rope(case)
    if inv_freq is None:
        print(f"warning: {name}: no rotary_emb.inv_freq found; RoPE tables not checked")
    elif (any(abs(a - b) > 1e-5 * b for a, b in zip(inv_freq, ref_inv)) or len(inv_freq) != len(ref_inv)
          or abs(att_scale - ref_scale) > 1e-6):
        raise SystemExit(f"{name}: transformers' RoPE differs from reference_rope() (an older transformers?)\n"
                         f" hf  {inv_freq} x{att_scale}\n ref {ref_inv} x{ref_scale}")
    if rs.get("rope_type") == "llama3":
        bands = llama3_bands(case["theta"], case["hd"], rs)
        assert all(bands.values()), f"llama3 bands not all present: {bands}"
        notes.append(f"llama3 RoPE bands over the {case['hd'] // 2} frequency pairs: {bands}.")
    if rs.get("rope_type") == "dynamic":
        max_pos, factor, hd = case["max_pos"], rs["factor"], case["hd"]
        base = case.get("theta", 10000.0) * (factor * PROMPT_LEN / max_pos - (factor - 1)) ** (hd / (hd - 2))
        notes.append(f"Dynamic NTK: transformers recomputes base = theta * (factor*L/max_pos - (factor-1))^(hd/(hd-2)) "
                     f"from the longest position L of each forward (prompt: L={PROMPT_LEN}, base={base:.6g}). "
                     "The greedy loop re-runs the whole sequence each step, so every token's keys use the base of "
                     "the current total length; a KV cache keeps earlier keys at older bases, so only "
                     "the prompt logits are directly comparable (greedy_full_recompute: true).")
    if arch in ("mistral", "phi3"):
        check_sliding_window(arch, model, case, prompt)
        notes.append(f"sliding_window={case['sliding_window']}: query i attends keys j with i - j < "
                     f"{case['sliding_window']} (W keys including itself), as transformers' eager mask does; "
                     "checked here against the same weights without a window.")
    if arch == "qwen2":
        notes.append("Qwen2: q/k/v projections have (random) biases, o_proj none; use_sliding_window false.")
    if arch == "phi3":
        notes.append(f"Phi-3: q|k|v fused in qkv_proj and gate|up in gate_up_proj; sliding_window="
                     f"{case['sliding_window']}.")
    if arch == "qwen3":
        notes.append("Qwen3: each q head and each k head RMSNorm'ed (random q_norm / k_norm weights) before RoPE; "
                     "no biases; use_sliding_window false.")
    if case["hd"] * case["nh"] != case["hidden"]:
        notes.append(f"head_dim {case['hd']} given explicitly: nh*hd={case['hd'] * case['nh']} != hidden "
                     f"{case['hidden']}.")

    flat = logits.flatten()
    assert float(flat.std()) > 0.1, "logits are all close to 0: weights too small"
    import transformers
    expected = {"prompt_ids": prompt, "greedy_ids": greedy, "dtype": save_dtype, "compute_dtype": "float32",
                "greedy_full_recompute": rs.get("rope_type") == "dynamic", "greedy_margins": margins,
                "eos_token_id": EOS_ID, "rope_inv_freq": inv_freq, "rope_attention_scaling": att_scale,
                "generator": f"tools/make_golden.py, torch {torch.__version__}, transformers {transformers.__version__}",
                "note": " ".join(notes),
                "logits": [[sig6(x) for x in row] for row in logits.tolist()]}
    write_json(os.path.join(out_dir, "expected.json"), expected)
    size_kb = os.path.getsize(os.path.join(out_dir, "model.safetensors")) / 1024
    print(f"{name:20s} {arch:8s} {layout:9s} {save_dtype:9s} vocab {case['vocab']} H {case['hidden']} "
          f"nh {case['nh']} nkv {case['nkv']} hd {case['hd']}  {size_kb:7.1f} KiB  "
          f"greedy {greedy}  min margin {min(margins):.3g}")


# ---------------------------------------------------------------- B. stories260K (llama2.c)

def read_llama2c_checkpoint(path):
    """llama2.c legacy checkpoint -> (header dict, {name: (flat float array, shape)}); matrices are [out, in]."""
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack_from("<7i", data, 0)
    shared = vocab > 0
    vocab, hs = abs(vocab), dim // n_heads
    floats = array("f")
    floats.frombytes(data[28:])
    if sys.byteorder != "little":
        floats.byteswap()
    layout = [("token_embedding", (vocab, dim)), ("rms_att", (n_layers, dim)),
              ("wq", (n_layers, n_heads * hs, dim)), ("wk", (n_layers, n_kv * hs, dim)),
              ("wv", (n_layers, n_kv * hs, dim)), ("wo", (n_layers, dim, n_heads * hs)),
              ("rms_ffn", (n_layers, dim)), ("w1", (n_layers, hidden, dim)), ("w2", (n_layers, dim, hidden)),
              ("w3", (n_layers, hidden, dim)), ("rms_final", (dim,)),
              ("freq_cis_real", (seq_len, hs // 2)), ("freq_cis_imag", (seq_len, hs // 2))]
    if not shared:
        layout.append(("wcls", (vocab, dim)))
    weights, off = {}, 0
    for name, shape in layout:
        n = math.prod(shape)
        weights[name] = (floats[off:off + n], shape)
        off += n
    if off != len(floats):
        raise ValueError(f"{path}: {len(floats) - off} floats left over; not a llama2.c legacy checkpoint?")
    header = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                  vocab_size=vocab, seq_len=seq_len, shared_classifier=shared)
    return header, weights


def read_llama2c_tokenizer(path, vocab_size):
    with open(path, "rb") as f:
        data = f.read()
    pieces, off = [], 4  # int32 max_token_length, then per token: float32 score, int32 len, bytes
    for _ in range(vocab_size):
        _score, n = struct.unpack_from("<fi", data, off)
        pieces.append(data[off + 8:off + 8 + n])
        off += 8 + n
    return pieces


def decode_llama2c(pieces, ids, prev=BOS_ID):
    """As llama2.c's decode(): drop the leading space after BOS, "<0xXX>" pieces are raw bytes."""
    out = bytearray()
    for t in ids:
        piece = pieces[t]
        if prev == BOS_ID and piece.startswith(b" "):
            piece = piece[1:]
        m = re.fullmatch(rb"<0x([0-9A-Fa-f]{2})>", piece)
        out += bytes([int(m.group(1), 16)]) if m else piece
        prev = t
    return out.decode("utf-8", errors="replace")


def make_stories(bin_path, tok_path, out_path):
    import transformers
    h, w = read_llama2c_checkpoint(bin_path)
    hd = h["dim"] // h["n_heads"]

    def tensor(name, layer=None):
        flat, shape = w[name]
        t = torch.frombuffer(bytearray(flat.tobytes()), dtype=torch.float32).clone().view(*shape)
        return t if layer is None else t[layer]

    def rope_permute(wt, heads):  # llama2.c rotates pairs (2i, 2i+1); HF rotate_half pairs (i, i + hd/2)
        return wt.view(heads, hd // 2, 2, h["dim"]).transpose(1, 2).reshape(heads * hd, h["dim"])

    config = transformers.LlamaConfig(
        vocab_size=h["vocab_size"], hidden_size=h["dim"], intermediate_size=h["hidden_dim"],
        num_hidden_layers=h["n_layers"], num_attention_heads=h["n_heads"], num_key_value_heads=h["n_kv_heads"],
        head_dim=hd, max_position_embeddings=h["seq_len"], rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=h["shared_classifier"], bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        attn_implementation="eager")
    config._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(config).to(torch.float32).eval()
    classifier = tensor("token_embedding" if h["shared_classifier"] else "wcls")
    sd = {"model.embed_tokens.weight": tensor("token_embedding"), "model.norm.weight": tensor("rms_final")}
    if not h["shared_classifier"]:  # a tied lm_head is the embedding itself
        sd["lm_head.weight"] = classifier
    names = {"rms_att": "input_layernorm", "rms_ffn": "post_attention_layernorm", "wv": "self_attn.v_proj",
             "wo": "self_attn.o_proj", "w1": "mlp.gate_proj", "w2": "mlp.down_proj", "w3": "mlp.up_proj"}
    for i in range(h["n_layers"]):
        p = f"model.layers.{i}."
        sd.update({p + hf + ".weight": tensor(name, i) for name, hf in names.items()})
        sd[p + "self_attn.q_proj.weight"] = rope_permute(tensor("wq", i), h["n_heads"])
        sd[p + "self_attn.k_proj.weight"] = rope_permute(tensor("wk", i), h["n_kv_heads"])
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    assert torch.equal(model.lm_head.weight, classifier), "classifier not loaded"

    ids = [BOS_ID]
    with torch.no_grad():
        for _ in range(STORIES_TOKENS):
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
    result = {"prompt_ids": [BOS_ID], "greedy_ids": ids[1:],
              "source": "PyTorch forward of stories260K.bin with transformers LlamaForCausalLM",
              "note": f"Greedy argmax of full forwards (float32, CPU), {STORIES_TOKENS} tokens, not stopped at BOS "
                      "(llama2.c's run stops when it samples BOS=1). transformers " + transformers.__version__}
    if tok_path:
        pieces = read_llama2c_tokenizer(tok_path, h["vocab_size"])
        stop = ids.index(BOS_ID, 1) if BOS_ID in ids[1:] else len(ids)
        result["text"] = decode_llama2c(pieces, ids[1:stop])
        result["text_note"] = "llama2.c decode of greedy_ids up to the first BOS (as run.c prints it)"
        print(result["text"])
        if not result["text"].startswith(STORIES_FIRST_SENTENCE):
            raise SystemExit(f"stories260K text does not start with {STORIES_FIRST_SENTENCE!r}: loading is wrong")
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    write_json(out_path, result)
    print(f"stories260k: {STORIES_TOKENS} greedy ids -> {out_path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", help="where the <case>/ folders go (tests/fixtures/golden)")
    ap.add_argument("--cases", nargs="*", help="only these cases (default: all)")
    ap.add_argument("--stories", help="llama2.c stories260K.bin: also make the stories260K greedy fixture")
    ap.add_argument("--stories-tokenizer", help="llama2.c tok512.bin (default: tok512.bin beside --stories)")
    ap.add_argument("--stories-out", help="default OUT_DIR/stories260k_greedy.json")
    args = ap.parse_args()
    if torch is None:
        raise SystemExit("make_golden.py needs torch and transformers (CPU torch is enough)")
    torch.set_num_threads(1)  # one reduction order, so reruns give the same bits
    known = {c["name"] for c in CASES}
    unknown = set(args.cases or []) - known
    if unknown:
        raise SystemExit(f"unknown cases {sorted(unknown)}; known: {sorted(known)}")
    for case in CASES:
        if not args.cases or case["name"] in args.cases:
            make_case(case, args.out_dir)
    if args.stories:
        tok = args.stories_tokenizer
        beside = os.path.join(os.path.dirname(args.stories), "tok512.bin")
        if tok is None and os.path.exists(beside):
            tok = beside
        make_stories(args.stories, tok, args.stories_out or os.path.join(args.out_dir, "stories260k_greedy.json"))


if __name__ == "__main__":
    main()
