#!/usr/bin/env python3
"""Structured output on a GPU with the Python standard library alone (GPU
machines may lack jsonschema and the openai client): serves the built-in demo
model on the device, sends constrained and free completion requests at once
(so that constrained rows share decode steps, CUDA graphs included, with free
ones), and checks every constrained answer that finished against its schema
by hand. The demo model's random weights never write JSON unprompted, so each
valid answer is the constraint's work.

    python3 tools/check_structured_gpu.py BUILD/tessera [DEVICE]   (DEVICE: cuda, the default, or cpu)

Prints the counts and any invalid answer; exits 1 unless every constrained
answer finished and is valid.
"""

import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3}},
    "required": ["name", "age", "tags"]}
REQUESTS = 48  # a round: half of them constrained
ROUNDS = 2


def valid(value):
    """SCHEMA's checks, written out."""
    return (isinstance(value, dict) and list(value) == ["name", "age", "tags"] and isinstance(value["name"], str)
            and len(value["name"]) <= 8 and type(value["age"]) is int and 0 <= value["age"] <= 120
            and isinstance(value["tags"], list) and len(value["tags"]) <= 3
            and all(tag in ("red", "green") for tag in value["tags"]))


def serve(binary, model, device, log_path):
    """Starts the server; returns the process and its base URL once /health answers."""
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, "serve", "api_server", str(model), "--server-name", "127.0.0.1",
                             "--server-port", "0", "--model-name", "demo", "--device", device],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", Path(log_path).read_text())
        if match:
            url = f"http://127.0.0.1:{match.group(1)}"
            try:
                if urllib.request.urlopen(url + "/health", timeout=5).status == 200:
                    return proc, url
            except OSError:
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    sys.exit("the server did not start:\n" + Path(log_path).read_text())


def main():
    binary = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cuda"
    work = Path(tempfile.mkdtemp())
    subprocess.run([binary, "demo_model", str(work / "demo")], check=True, capture_output=True)
    proc, url = serve(binary, work / "demo", device, work / "server.log")
    vocab = json.loads((work / "demo" / "tokenizer.json").read_text())["model"]["vocab"]
    bias = {str(vocab['"']): 6, str(vocab["}"]): 6}  # so that random strings end within max_tokens
    answers = {}

    def ask(seed):
        body = {"model": "demo", "prompt": "Once upon a time", "max_tokens": 300, "temperature": 1.0, "seed": seed,
                "logit_bias": bias}
        if seed % 2 == 0:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
        request = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        answers[seed] = json.load(urllib.request.urlopen(request, timeout=300))["choices"][0]

    try:
        for round_ in range(ROUNDS):
            threads = [threading.Thread(target=ask, args=(round_ * 1000 + i,)) for i in range(REQUESTS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        proc.terminate()
        proc.wait(60)
    constrained = [answer for seed, answer in answers.items() if seed % 2 == 0]
    finished = [answer for answer in constrained if answer["finish_reason"] == "stop"]
    good = [answer for answer in finished if valid(json.loads(answer["text"]))]
    free_json = sum(answer["text"].lstrip().startswith("{") for seed, answer in answers.items() if seed % 2 == 1)
    print(f"{device}: {len(constrained)} constrained answers, {len(finished)} finished, {len(good)} valid; "
          f"free answers starting with a brace: {free_json}")
    for answer in finished:
        if answer not in good:
            print("invalid:", repr(answer["text"][:200]))
    log = (work / "server.log").read_text().splitlines()
    print("\n".join(line for line in log if "kernels loaded" in line or "decode steps" in line))
    return 0 if len(good) == len(constrained) == REQUESTS * ROUNDS // 2 else 1


if __name__ == "__main__":
    sys.exit(main())
