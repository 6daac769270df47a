"""The serving commands as a user runs them: `serve api_server` flags (LMDeploy's
names; mistakes are usage errors that say what is wrong; features not there
yet are refused with a hint), --tp on the CPU, `chat` in a terminal, and
`check_env`."""

import json
import os
import pty
import re
import select
import shutil
import subprocess
import time

import pytest
import requests

from test_server_helpers import Server, cpu_greedy_completion, make_demo_model


@pytest.fixture(scope="module")
def demo_dir(tessera_bin, tmp_path_factory):
    return make_demo_model(tessera_bin, tmp_path_factory.mktemp("cli-serve") / "demo")


def serve(binary, *args):
    return subprocess.run([str(binary), "serve", "api_server", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("args, message", [
    (["--bogus-flag"], "--bogus-flag"),
    (["--dtype", "float64"], "float64"),
    (["--backend", "vllm"], "vllm"),
    (["--server-port", "70000"], "70000"),
    (["--cache-max-entry-count", "-1"], "cache-max-entry-count"),
    (["--quant-policy", "3"], "quant-policy"),
    (["--max-batch-size", "zero"], "max-batch-size"),
    (["--communicator", "mpi"], "--communicator"),
    (["--tool-call-parser", "granite"], "--tool-call-parser granite: no such parser"),
    (["--tool-call-parser", "granite"], "internlm, qwen, llama3, mistral"),
    (["--reasoning-parser", "o1"], "deepseek-r1, qwen-qwq"),
])
def test_bad_flags_are_usage_errors_naming_the_problem(tessera_bin, demo_dir, args, message):
    r = serve(tessera_bin, demo_dir, *args)
    assert r.returncode != 0
    assert message in r.stderr + r.stdout
    assert "loading" not in r.stderr  # refused before the model is read


def test_missing_model_directory_is_a_usage_error(tessera_bin, tmp_path):
    r = serve(tessera_bin, tmp_path / "nope")
    assert r.returncode != 0 and "nope" in r.stderr


def test_a_hub_repository_id_gets_the_download_command(tessera_bin):
    r = serve(tessera_bin, "internlm/internlm2_5-7b-chat", "--tp", "2")
    assert r.returncode != 0
    assert "internlm/internlm2_5-7b-chat is not a directory" in r.stderr, r.stderr
    assert "huggingface-cli download internlm/internlm2_5-7b-chat --local-dir DIR" in r.stderr, r.stderr


@pytest.mark.parametrize("args, message", [
    (["--model-format", "fp8"], "declares no FP8 quantization_config"),
    (["--model-format", "gptq"], "declares no GPTQ quantization_config"),
    (["--model-format", "awq"], "declares no AWQ quantization_config"),
    (["--nnodes", "2"], "--tp 1 does not split over --nnodes 2"),
    (["--tp", "3", "--backend", "cpu"], "tensor-parallel sizes that work"),
    # LMDeploy flags tessera takes and refuses, each with what to do instead
    (["--ssl"], "--ssl: tessera serves plain HTTP"),
    (["--dp", "2"], "--dp 2: tessera runs one engine a server"),
    (["--adapters", "mine=/tmp/lora"], "LoRA adapters are not supported"),
    (["--revision", "main"], "--revision: tessera does not download models"),
    (["--download-dir", "/tmp"], "--download-dir: tessera does not download models"),
    (["--proxy-url", "http://127.0.0.1:8000"], "does not register with LMDeploy's proxy server"),
    (["--hf-overrides", "{\"rope_theta\": "], "--hf-overrides is not JSON"),
    (["--hf-overrides", "[1]"], "--hf-overrides must be a JSON object"),
])
def test_what_is_not_supported_yet_is_refused_with_a_hint(tessera_bin, demo_dir, args, message):
    r = serve(tessera_bin, demo_dir, "--server-name", "127.0.0.1", "--server-port", "0", *args)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert "hint:" in r.stderr


@pytest.mark.parametrize("args, tokens", [([], 8192), (["--max-prefill-token-num", "1000"], 1000),
                                          (["--num-tokens-per-iter", "1000", "--max-prefill-iters", "2"], 1000),
                                          (["--dp", "1"], 8192)])
def test_lmdeploy_step_flags_set_the_tokens_a_step(tessera_bin, demo_dir, tmp_path, args, tokens):
    server = Server(tessera_bin, demo_dir, tmp_path / "server.log", "--backend", "cpu", *args)
    try:
        assert requests.get(server.url + "/health", timeout=10).status_code == 200
    finally:
        assert server.stop() == 0
    log = (tmp_path / "server.log").read_text()
    assert f"scheduler: up to 64 sequences and {tokens} tokens a step" in log, log


def completion(binary, model, log, *flags):
    """The greedy text a server over `model` gives a fixed prompt, and its startup log."""
    reply = cpu_greedy_completion(binary, model, log, *flags, prompt="hello there", max_tokens=16)
    return reply["choices"][0]["text"], log.read_text()


@pytest.mark.parametrize("tp", [1, 2])
def test_hf_overrides_serve_as_an_edited_config_does(tessera_bin, demo_dir, tmp_path, tp):
    edited = tmp_path / "edited"
    shutil.copytree(demo_dir, edited)
    config = json.loads((edited / "config.json").read_text())
    config.update(rope_theta=500.0, max_position_embeddings=1024)
    (edited / "config.json").write_text(json.dumps(config))
    patch = json.dumps({"rope_theta": 500.0, "max_position_embeddings": 1024})
    tp_flags = ["--tp", str(tp)]
    overridden, log = completion(tessera_bin, demo_dir, tmp_path / "overridden.log", "--hf-overrides", patch, *tp_flags)
    want, _ = completion(tessera_bin, edited, tmp_path / "edited.log", *tp_flags)
    plain, _ = completion(tessera_bin, demo_dir, tmp_path / "plain.log", *tp_flags)
    assert overridden == want
    assert overridden != plain  # the comparison can fail: the model's own rope_theta answers otherwise
    assert "session length 1024" in log and "--hf-overrides: config.json read with" in log, log


def test_hf_overrides_config_errors_name_the_override(tessera_bin, demo_dir):
    r = serve(tessera_bin, demo_dir, "--server-name", "127.0.0.1", "--server-port", "0", "--hf-overrides",
              '{"num_attention_heads": 3}')
    assert r.returncode != 0
    assert "config.json with --hf-overrides: 'num_key_value_heads' (2) must divide num_attention_heads (3)" in r.stderr


def test_terminate_by_client_only_when_allowed(tessera_bin, demo_dir, tmp_path):
    refused = Server(tessera_bin, demo_dir, tmp_path / "refused.log")
    try:
        r = requests.get(refused.url + "/terminate", timeout=10)
        assert r.status_code == 400 and "--allow-terminate-by-client" in r.json()["error"]["message"]
        assert requests.get(refused.url + "/health", timeout=10).status_code == 200
    finally:
        assert refused.stop() == 0
    # LMDeploy's --communicator nccl is accepted (as --disable-custom-all-reduce) alongside.
    allowed = Server(tessera_bin, demo_dir, tmp_path / "allowed.log", "--allow-terminate-by-client",
                     "--communicator", "nccl")
    assert requests.get(allowed.url + "/terminate", timeout=10).status_code == 200
    # It shuts down as on SIGTERM: drained, exit status 0, without a signal from outside.
    assert allowed.proc.wait(timeout=30) == 0
    assert "GET /terminate: shutting down" in allowed.read_log()
    allowed.stop()


def test_a_port_in_use_is_a_clear_error(tessera_bin, demo_dir, tmp_path):
    s = Server(tessera_bin, demo_dir, tmp_path / "first.log")
    try:
        r = serve(tessera_bin, demo_dir, "--server-name", "127.0.0.1", "--server-port", s.port)
        assert r.returncode != 0
        assert "cannot listen" in r.stderr and "--server-port" in r.stderr
    finally:
        assert s.stop() == 0


def greedy(server, prompt):
    r = requests.post(server.url + "/v1/completions", timeout=60, json={
        "model": "demo", "prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def test_tensor_parallel_ranks_serve_the_same_tokens(tessera_bin, demo_dir, tmp_path):
    prompts = ["Once upon a time", "The little dog", "Hello"]
    one = Server(tessera_bin, demo_dir, tmp_path / "tp1.log", "--backend", "cpu")
    try:
        expected = [greedy(one, p) for p in prompts]
    finally:
        assert one.stop() == 0
    two = Server(tessera_bin, demo_dir, tmp_path / "tp2.log", "--backend", "cpu", "--tp", "2")
    try:
        assert [greedy(two, p) for p in prompts] == expected
    finally:
        assert two.stop() == 0


def greedy_with_usage(server, prompt):
    r = requests.post(server.url + "/v1/completions", timeout=120, json={
        "model": "demo", "prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"], r.json()["usage"]["prompt_tokens"]


def test_rope_scaling_factor_takes_effect_past_the_trained_context(tessera_bin, demo_dir, tmp_path):
    # The demo model is trained for 4,096 positions and has no rope_scaling.
    # Dynamic NTK changes RoPE only for a sequence longer than that: a short
    # prompt is answered the same with and without the flag, a long one not.
    short, long = "Once upon a time", "Once upon a time there was a little dog. " * 220
    answers = {}
    for name, extra in [("plain", []), ("scaled", ["--rope-scaling-factor", "2.0"]),
                        ("scaled-tp2", ["--rope-scaling-factor", "2.0", "--tp", "2"])]:
        server = Server(tessera_bin, demo_dir, tmp_path / f"{name}.log", "--backend", "cpu", "--session-len", "8192",
                        *extra)
        try:
            answers[name] = [greedy_with_usage(server, p) for p in (short, long)]
            log = server.read_log()
        finally:
            assert server.stop() == 0
        if extra:
            assert "--rope-scaling-factor 2: RoPE is dynamic NTK over the model's 4096 trained positions" in log
    assert answers["scaled"][1][1] > 4096  # the long prompt is past the trained context
    assert answers["scaled"][0] == answers["plain"][0]
    assert answers["scaled"][1][0] != answers["plain"][1][0]
    assert answers["scaled-tp2"] == answers["scaled"]  # the ranks' shards are made with the override too


def kv_blocks(log):
    match = re.search(r"KV cache(?: \(int[48]\))? +\S+ GiB +(\d+) blocks x", log)
    assert match, log
    return int(match.group(1))


def test_quant_policy_8_and_4_serve_from_a_quantized_kv_cache_with_more_blocks(tessera_bin, demo_dir, tmp_path):
    # The demo model's KV rows are 32 f32 values on the CPU (128 bytes), 32
    # codes plus a scale and zero in int8 (40 bytes) and in int4 (24 bytes):
    # the same memory holds 3.2 and 5.3 times the blocks.
    blocks = {}
    for name, extra in [("plain", []), ("int8", ["--quant-policy", "8"]), ("int4", ["--quant-policy", "4"])]:
        server = Server(tessera_bin, demo_dir, tmp_path / f"{name}.log", "--backend", "cpu",
                        "--cache-max-entry-count", "0.001", *extra)
        try:
            text, prompt_tokens = greedy_with_usage(server, "Once upon a time there was a little dog. " * 20)
            assert prompt_tokens > 64 and text  # several blocks, and an answer
            log = server.read_log()
        finally:
            assert server.stop() == 0
        blocks[name] = kv_blocks(log)
        bits = name[3:]
        assert (f"--quant-policy {bits}: the KV cache holds {bits}-bit codes" in log) == bool(extra)
        assert (f"KV cache ({name})" in log) == bool(extra)  # the memory plan's table says which
    assert 2.5 < blocks["int8"] / blocks["plain"] < 4.0, blocks
    assert 4.5 < blocks["int4"] / blocks["plain"] < 6.0, blocks


def test_check_env_reports_the_machine_and_the_choice(tessera_bin):
    r = subprocess.run([str(tessera_bin), "check_env"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for field in ["OS", "CPU", "memory", "NVIDIA driver", "CUDA (driver)", "NCCL", "FlashInfer", "GPUs",
                   "tessera would use", "backend", "dtype", "communicator"]:
        assert field in r.stdout, field


def read_until(fd, marker, timeout=60):
    out = b""
    deadline = time.time() + timeout
    while marker not in out and time.time() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    return out


def test_chat_in_a_terminal_streams_replies_over_several_turns(tessera_bin, demo_dir):
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(tessera_bin), [str(tessera_bin), "chat", str(demo_dir), "--max-new-tokens", "12",
                                    "--temperature", "0", "--log-level", "ERROR"])
    try:
        assert b">>> " in read_until(fd, b">>> ")
        replies = []
        for line in [b"Once upon a time\n", b"and then?\n"]:
            os.write(fd, line)
            out = read_until(fd, b">>> ")
            assert out.endswith(b">>> "), out
            replies.append(out.split(b"\n", 1)[1].rsplit(b"\n", 2)[0].strip())
        assert all(replies), replies
        os.write(fd, b"/reset\n")
        assert b"cleared" in read_until(fd, b">>> ")
        os.write(fd, b"Once upon a time\n")
        again = read_until(fd, b">>> ").split(b"\n", 1)[1].rsplit(b"\n", 2)[0].strip()
        assert again == replies[0], "after /reset the first turn should be answered as before"
        os.write(fd, b"exit\n")
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
