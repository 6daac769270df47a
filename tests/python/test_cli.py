"""The tessera command line as a user runs it: stdout carries only the generated
text, logs go to stderr, and mistakes end in a clear message and a non-zero status."""

import json
import subprocess

import pytest

STORY_START = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."


def run(binary, *args, check=True):
    result = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"tessera {' '.join(map(str, args))} failed ({result.returncode}):\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def demo_dir(tessera_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "model"
    run(tessera_bin, "demo_model", out)
    return out


def test_demo_model_generates_the_same_text_every_time(tessera_bin, demo_dir):
    first = run(tessera_bin, "generate", demo_dir, "--prompt", "Once upon a time", "--max-tokens", "20")
    second = run(tessera_bin, "generate", demo_dir, "--prompt", "Once upon a time", "--max-tokens", "20")
    assert first.stdout == second.stdout
    assert first.stdout.strip(), "no text generated"
    assert "INFO" not in first.stdout, "logs leaked onto stdout"
    assert "loaded LlamaForCausalLM" in first.stderr


def test_demo_model_is_byte_identical_on_every_build(tessera_bin, demo_dir, tmp_path):
    again = tmp_path / "again"
    run(tessera_bin, "demo_model", again)
    assert (again / "model.safetensors").read_bytes() == (demo_dir / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == (demo_dir / "tokenizer.json").read_bytes()


def test_sampling_with_a_seed_is_reproducible(tessera_bin, demo_dir):
    args = ["generate", demo_dir, "--prompt", "Hello", "--max-tokens", "16", "--temperature", "1.0"]
    a = run(tessera_bin, *args, "--seed", "7").stdout
    b = run(tessera_bin, *args, "--seed", "7").stdout
    assert a == b


def test_stories260k_tells_llama2c_story(tessera_bin, testdata, tmp_path):
    source = testdata / "models" / "stories260K"
    out = tmp_path / "stories"
    run(tessera_bin, "convert", "llama2c", source / "stories260K.bin", source / "tok512.bin", out)
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json"]:
        assert (out / name).exists(), name
    result = run(tessera_bin, "generate", out, "--max-tokens", "200")
    assert result.stdout.startswith(STORY_START), result.stdout[:200]


def safetensors_dtypes(path):
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    return {entry["dtype"] for name, entry in header.items() if name != "__metadata__"}


def test_random_model_is_stored_in_its_dtype_with_its_rope_and_generates(tessera_bin, tmp_path):
    out = tmp_path / "random"
    run(tessera_bin, "convert", "random_model", "--shape", "demo", "--dtype", "bfloat16", "--rope-theta", "5e7",
        "--dynamic-ntk-factor", "2.5", "--eos-ids", "2", "3", out)
    config = json.loads((out / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16"
    assert config["rope_theta"] == 5e7
    assert config["rope_scaling"] == {"type": "dynamic", "factor": 2.5}
    assert config["eos_token_id"] == [2, 3]
    assert safetensors_dtypes(out / "model.safetensors") == {"BF16"}
    result = run(tessera_bin, "generate", out, "--prompt", "Once upon a time", "--max-tokens", "12")
    assert result.stdout.strip(), "no text generated"
    again = tmp_path / "again"
    run(tessera_bin, "convert", "random_model", "--shape", "demo", "--dtype", "float32", again)
    assert safetensors_dtypes(again / "model.safetensors") == {"F32"}


def test_random_model_of_a_named_shape_needs_a_tokenizer(tessera_bin, tmp_path):
    out = tmp_path / "random"
    result = run(tessera_bin, "convert", "random_model", "--shape", "internlm2_5-7b", out, check=False)
    assert result.returncode != 0
    assert "--tokenizer-from" in result.stderr
    result = run(tessera_bin, "convert", "random_model", "--shape", "internlm2_5-7b", "--tokenizer-from", tmp_path,
                 out, check=False)
    assert result.returncode != 0
    assert "no tokenizer.model or tokenizer.json" in result.stderr, result.stderr
    assert not out.exists(), "a refused random model left files behind"


def test_random_model_with_a_tokenizer_larger_than_its_vocabulary_writes_nothing(tessera_bin, testdata, tmp_path):
    out = tmp_path / "random"
    too_big = testdata / "tokenizers" / "internlm2"
    result = run(tessera_bin, "convert", "random_model", "--shape", "100m", "--tokenizer-from", too_big, out,
                 check=False)
    assert result.returncode != 0
    assert "92544 pieces" in result.stderr, result.stderr
    assert not out.exists(), "a refused random model left files behind"


def test_missing_model_directory_is_a_usage_error(tessera_bin, tmp_path):
    result = run(tessera_bin, "generate", tmp_path / "nope", "--prompt", "x", check=False)
    assert result.returncode != 0
    assert "nope" in result.stderr


def test_directory_without_weights_names_what_was_looked_for(tessera_bin, demo_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ["config.json", "tokenizer.json", "tokenizer_config.json"]:
        (broken / name).write_bytes((demo_dir / name).read_bytes())
    result = run(tessera_bin, "generate", broken, "--prompt", "x", check=False)
    assert result.returncode == 2, result.stderr
    assert "safetensors" in result.stderr
    assert "Traceback" not in result.stderr and "terminate" not in result.stderr


def test_truncated_weights_are_refused_with_the_file_named(tessera_bin, demo_dir, tmp_path):
    broken = tmp_path / "truncated"
    broken.mkdir()
    for name in ["config.json", "tokenizer.json", "tokenizer_config.json"]:
        (broken / name).write_bytes((demo_dir / name).read_bytes())
    data = (demo_dir / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) // 2])
    result = run(tessera_bin, "generate", broken, "--prompt", "x", check=False)
    assert result.returncode == 2, result.stderr
    assert "model.safetensors" in result.stderr


def test_unknown_flag_and_bad_value_are_usage_errors(tessera_bin, demo_dir):
    result = run(tessera_bin, "generate", demo_dir, "--no-such-flag", check=False)
    assert result.returncode != 0 and "no-such-flag" in result.stderr + result.stdout
    result = run(tessera_bin, "generate", demo_dir, "--max-tokens", "-3", check=False)
    assert result.returncode != 0
    result = run(tessera_bin, "generate", demo_dir, "--log-level", "LOUD", check=False)
    assert result.returncode != 0 and "LOUD" in result.stderr


@pytest.mark.parametrize("bits", ["8", "4"])
def test_bench_ops_and_engine_time_a_quantized_kv_cache_on_the_cpu(tessera_bin, bits):
    # --quant-policy 8 and 4 reach the caches these benchmarks allocate: the
    # ops table names its attention rows, the engine line its cache.
    ops = run(tessera_bin, "bench", "ops", "--random", "100m", "--device", "cpu", "--contexts", "64", "--repeats",
              "1", "--skip-forward", "--quant-policy", bits)
    assert f"decode attention 64 int{bits}" in ops.stdout, ops.stdout
    engine = run(tessera_bin, "bench", "engine", "--random", "100m", "--device", "cpu", "--batch", "2",
                 "--prompt-tokens", "8", "--new-tokens", "4", "--skip-single", "--quant-policy", bits)
    assert f"KV cache in int{bits}" in engine.stdout and "output tokens/s" in engine.stdout, engine.stdout


@pytest.mark.parametrize("policy, cache", [("0", "compute dtype"), ("8", "int8"), ("4", "int4")])
def test_bench_attention_prints_its_table_on_the_cpu(tessera_bin, policy, cache):
    result = run(tessera_bin, "bench", "attention", "--device", "cpu", "--tokens", "16,33", "--heads", "4",
                 "--kv-heads", "2", "--head-dim", "64", "--repeats", "1", "--quant-policy", policy)
    assert "matmul rate" in result.stdout and f"KV cache in {cache}" in result.stdout, result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()[:2].isdigit()]
    assert [row[0] for row in rows] == ["16", "33"], result.stdout
    assert all(float(row[1]) > 0 for row in rows), result.stdout  # the scalar (CPU) kernel was timed
    bad = run(tessera_bin, "bench", "attention", "--device", "cpu", "--tokens", "16,x", check=False)
    assert bad.returncode == 2 and "--tokens" in bad.stderr
