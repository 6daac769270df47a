"""Tensor parallelism from the command line on a machine without a GPU: the
flags parse, CPU ranks with --disable-custom-all-reduce give tp 1's text, a GPU
plan without GPUs is a clear usage error naming the fix, `bench allreduce`
prints its table and `check_env` the communicator choices."""

import os
import subprocess

import pytest

from test_server_helpers import make_demo_model


@pytest.fixture(scope="module")
def demo_dir(tessera_bin, tmp_path_factory):
    return make_demo_model(tessera_bin, tmp_path_factory.mktemp("cli-tp") / "demo")


def run(binary, *args, env=None):
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def has_gpu(binary):
    r = run(binary, "check_env")
    return "GPUs            0" not in r.stdout


def test_cpu_ranks_with_the_nccl_switch_give_the_text_of_tp1(tessera_bin, demo_dir):
    args = ["generate", demo_dir, "--prompt", "Once upon a time", "--max-tokens", "12", "--ignore-eos"]
    one = run(tessera_bin, *args)
    two = run(tessera_bin, *args, "--tp", "2", "--disable-custom-all-reduce")
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert two.stdout == one.stdout
    assert "thread communicator" in two.stderr, two.stderr


def test_gpu_ranks_without_a_gpu_are_a_usage_error(tessera_bin, demo_dir):
    if has_gpu(tessera_bin):
        pytest.skip("this machine has a GPU")
    r = run(tessera_bin, "generate", demo_dir, "--prompt", "hi", "--tp", "2", "--device", "cuda")
    assert r.returncode == 2, r.stderr
    assert "no CUDA device is visible" in r.stderr and "hint:" in r.stderr, r.stderr


def test_a_bad_same_device_switch_names_the_variable(tessera_bin, demo_dir):
    r = run(tessera_bin, "generate", demo_dir, "--prompt", "hi", "--tp", "2", "--device", "cuda",
            env={"TESSERA_TP_SAME_DEVICE": "maybe"})
    assert r.returncode == 2, r.stderr
    assert "TESSERA_TP_SAME_DEVICE=maybe" in r.stderr, r.stderr


def test_serve_accepts_the_switch(tessera_bin, demo_dir):
    # Refused later for its tp, so it stops before listening: the flag itself parsed.
    r = run(tessera_bin, "serve", "api_server", demo_dir, "--server-port", "0", "--backend", "cpu", "--tp", "3",
            "--disable-custom-all-reduce")
    assert r.returncode != 0
    assert "tensor-parallel sizes that work" in r.stderr, r.stderr


def test_bench_allreduce_prints_latency_and_bus_bandwidth_per_size(tessera_bin):
    r = run(tessera_bin, "bench", "allreduce", "--tp", "2", "--max-bytes", "131072", "--iterations", "5")
    assert r.returncode == 0, r.stderr
    assert "thread" in r.stdout and "tcp" in r.stdout and "busGB/s" in r.stdout and "limit" in r.stdout, r.stdout
    rows = [line.split("|")[0].strip() for line in r.stdout.splitlines() if line.strip().endswith("%")]
    assert [row for row in rows if row] == ["8 KB", "32 KB", "128 KB"], r.stdout


def test_check_env_shows_the_communicator_choices(tessera_bin):
    r = run(tessera_bin, "check_env")
    assert r.returncode == 0, r.stderr
    assert "communicator" in r.stdout and "--nnodes" in r.stdout, r.stdout
    if has_gpu(tessera_bin):
        assert "TESSERA_TP_SAME_DEVICE=1" in r.stdout, r.stdout


def test_eager_mode_is_accepted_and_changes_nothing_on_the_cpu(tessera_bin, demo_dir):
    # LMDeploy's --eager-mode (no CUDA graphs): the CPU has no graphs, so the same text.
    args = ["generate", demo_dir, "--prompt", "Once upon a time", "--max-tokens", "12", "--ignore-eos"]
    plain = run(tessera_bin, *args)
    eager = run(tessera_bin, *args, "--eager-mode")
    assert plain.returncode == 0 and eager.returncode == 0, plain.stderr + eager.stderr
    assert eager.stdout == plain.stdout
    r = run(tessera_bin, "serve", "api_server", demo_dir, "--server-port", "0", "--backend", "cpu", "--tp", "3",
            "--eager-mode")
    assert "tensor-parallel sizes that work" in r.stderr, r.stderr  # parsed; refused later for its tp
