"""Helpers for the server tests (no tests here): starts `tessera serve api_server` on the demo model on a free loopback port
(--server-port 0; the port is read from the log) and stops it again."""

import os
import re
import signal
import subprocess
import time

import requests


class Server:
    def __init__(self, binary, model_dir, log_path, *extra, model_name="demo"):
        self.model_dir = model_dir
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [str(binary), "serve", "api_server", str(model_dir), "--server-name", "127.0.0.1",
             "--server-port", "0", "--model-name", model_name, *map(str, extra), *os.environ.get("TESSERA_SERVER_ARGS", "").split()],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.read_log()}")
            match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.read_log())
            if match:
                self.port = int(match.group(1))
            time.sleep(0.05)
        assert self.port, "the server did not report its port:\n" + self.read_log()
        self.url = f"http://127.0.0.1:{self.port}"
        while time.time() < deadline:
            try:
                if requests.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        self.stop()
        raise AssertionError("the server did not become ready:\n" + self.read_log())

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self, timeout=30):
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        return self.proc.returncode


def serving(server):
    """A module fixture's body: yields `server`, then stops it and requires a clean exit."""
    yield server
    assert server.stop() == 0, server.read_log()


def metric(text, name):
    """The value of one sample line (name with labels, exactly) of Prometheus text; 0 when absent."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def cpu_greedy_completion(binary, model_dir, log_path, *flags, prompt="hello", max_tokens=8):
    """A server over `model_dir` on the CPU with `flags`: its reply to one greedy completion (which must
    succeed) of `max_tokens` tokens; the server is stopped cleanly either way."""
    server = Server(binary, model_dir, log_path, "--backend", "cpu", *flags)
    try:
        reply = requests.post(server.url + "/v1/completions", timeout=60, json={
            "model": "demo", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
        assert reply.status_code == 200, reply.text
        return reply.json()
    finally:
        assert server.stop() == 0


def make_demo_model(binary, out_dir):
    if not (out_dir / "config.json").exists():
        subprocess.run([str(binary), "demo_model", str(out_dir)], check=True, capture_output=True, timeout=120)
    return out_dir


def env_timeout():
    return float(os.environ.get("TESSERA_TEST_TIMEOUT", "60"))
