#!/usr/bin/env python3
"""Writes real torch.save checkpoints for tessera's pytorch_model.bin loader test.

The C++ tests (tests/model/pytorch_bin_test.cc) build their archives by hand,
because torch is not installed where they run. This script gives them the real
thing: run it once on a machine with torch and commit the output, and the test
PyTorchBin.RealTorchSaveFile checks that tessera reads every tensor exactly.

    python tools/make_torch_bin_fixture.py tests/fixtures/torch_bin

Writes into the directory:
    pytorch_model.bin            torch.save(state_dict) with the defaults (zip, pickle protocol 2)
    protocol4/pytorch_model.bin  the same state dict with pickle_protocol=4
    sharded/                     the same split over two files plus pytorch_model.bin.index.json
    expected.json                {"torch_version", "variants", "tensors": {name: {dtype, shape, values}}}
                                 where values are the first elements, flattened, as numbers

The state dict is an nn.Module's (an OrderedDict carrying _metadata) plus tensors
of every dtype tessera reads, a 0-d tensor, an empty tensor, two tensors that
share one storage (a view at a non-zero offset), a larger tensor, and an
nn.Parameter (pickled through torch._utils._rebuild_parameter).
"""

import argparse
import collections
import json
import os

import torch

# torch dtype -> the safetensors name tessera's dtype_from_safetensors parses.
DTYPE_NAMES = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float64: "F64",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
NUM_VALUES = 16  # elements of each tensor recorded in expected.json


def make_state_dict():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    state = model.state_dict()  # OrderedDict with _metadata, pickled with BUILD
    state["extra.f16"] = torch.randn(2, 5).half()
    state["extra.bf16"] = torch.randn(3, 2).bfloat16()
    state["extra.f64"] = torch.randn(3, dtype=torch.float64)
    state["extra.i64"] = torch.arange(-3, 5, dtype=torch.int64)
    state["extra.i32"] = torch.tensor([[-(2**31), 2**31 - 1]], dtype=torch.int32)
    state["extra.i16"] = torch.tensor([-300, 7, 300], dtype=torch.int16)
    state["extra.i8"] = torch.tensor([-128, 0, 127], dtype=torch.int8)
    state["extra.u8"] = torch.tensor([0, 200, 255], dtype=torch.uint8)
    state["extra.bool"] = torch.tensor([True, False, True])
    state["extra.scalar"] = torch.tensor(3.5)
    state["extra.empty"] = torch.zeros(0, 4)
    base = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    state["shared.base"] = base
    state["shared.rows"] = base[1:3]  # same storage, storage_offset 3
    state["big"] = torch.randn(300, 257)  # numel past BININT2's range
    state["param"] = torch.nn.Parameter(torch.full((2, 2), 0.25))
    return state


def expected_entry(tensor):
    flat = tensor.detach().reshape(-1)[:NUM_VALUES]
    if tensor.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    values = flat.double().tolist() if tensor.dtype.is_floating_point else flat.tolist()
    return {"dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape), "values": values}


def write_sharded(state, directory):
    os.makedirs(directory, exist_ok=True)
    names = list(state.keys())
    half = len(names) // 2
    shards = {
        "pytorch_model-00001-of-00002.bin": names[:half],
        "pytorch_model-00002-of-00002.bin": names[half:],
    }
    weight_map = {}
    for file, shard_names in shards.items():
        shard = collections.OrderedDict((name, state[name]) for name in shard_names)
        torch.save(shard, os.path.join(directory, file))
        weight_map.update({name: file for name in shard_names})
    with open(os.path.join(directory, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory to write (e.g. tests/fixtures/torch_bin)")
    args = parser.parse_args()

    state = make_state_dict()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.save(state, os.path.join(args.out_dir, "pytorch_model.bin"))
    os.makedirs(os.path.join(args.out_dir, "protocol4"), exist_ok=True)
    torch.save(state, os.path.join(args.out_dir, "protocol4", "pytorch_model.bin"), pickle_protocol=4)
    write_sharded(state, os.path.join(args.out_dir, "sharded"))

    # Check the files read back as saved before recording them.
    loaded = torch.load(os.path.join(args.out_dir, "pytorch_model.bin"), weights_only=True)
    for name, tensor in state.items():
        assert torch.equal(loaded[name], tensor.detach()), name

    expected = {
        "torch_version": torch.__version__,
        "variants": ["protocol4", "sharded"],
        "tensors": {name: expected_entry(tensor) for name, tensor in state.items()},
    }
    with open(os.path.join(args.out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(f"wrote {len(state)} tensors to {args.out_dir} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
