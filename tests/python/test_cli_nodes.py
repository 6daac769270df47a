"""Tensor parallelism over two nodes from the command line, as two processes on
loopback (CPU ranks): `serve api_server --tp 2 --nnodes 2 --node-rank 0|1
--master-port P`. Node 0 serves the tokens of one process; SIGTERM on node 0
stops the worker cleanly; a worker that dies turns node 0's requests into
clear errors without killing node 0; nodes that disagree, or a --tp that does
not split over the nodes, are refused with the fix."""

import contextlib
import os
import signal
import socket
import subprocess

import pytest
import requests

from test_server_helpers import Server, make_demo_model


@pytest.fixture(scope="module")
def demo_dir(tessera_bin, tmp_path_factory):
    return make_demo_model(tessera_bin, tmp_path_factory.mktemp("cli-nodes") / "demo")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_args(port, node, *extra):
    return ["--backend", "cpu", "--tp", "2", "--nnodes", "2", "--node-rank", str(node), "--master-port", str(port),
            *extra]


class Worker:
    """Node 1: no HTTP, only its rank; the log is kept for the assertions."""

    def __init__(self, binary, model_dir, log_path, port, *extra, env=None):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([str(binary), "serve", "api_server", str(model_dir), *node_args(port, 1, *extra)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})

    def wait(self, timeout=60):
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def greedy(server, prompt):
    r = requests.post(server.url + "/v1/completions", timeout=60, json={
        "model": "demo", "prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True})
    return r


PROMPTS = ["Once upon a time", "The little dog"]


@contextlib.contextmanager
def two_nodes(binary, model_dir, tmp_path):
    """Node 1 started first (it waits for node 0), then node 0 until it is ready; both ended afterwards."""
    port = free_port()
    worker = Worker(binary, model_dir, tmp_path / "node1.log", port)
    node0 = None
    try:
        node0 = Server(binary, model_dir, tmp_path / "node0.log", *node_args(port, 0))
        yield node0, worker
    finally:
        if node0:
            node0.stop()
        worker.kill()


def test_two_nodes_serve_the_tokens_of_one_process_and_stop_together(tessera_bin, demo_dir, tmp_path):
    one = Server(tessera_bin, demo_dir, tmp_path / "one.log", "--backend", "cpu")
    try:
        expected = [greedy(one, p).json()["choices"][0]["text"] for p in PROMPTS]
    finally:
        assert one.stop() == 0
    with two_nodes(tessera_bin, demo_dir, tmp_path) as (node0, worker):
        got = [greedy(node0, p) for p in PROMPTS]
        assert all(r.status_code == 200 for r in got), [r.text for r in got]
        assert [r.json()["choices"][0]["text"] for r in got] == expected
        log = node0.read_log()
        assert "every node joined; this node runs ranks 0 .. 0 of 2" in log, log
        assert "tcp communicator: 1 CPU rank(s) on each of 2 nodes" in log, log
        assert node0.stop() == 0, node0.read_log()
        assert worker.wait(30) == 0, worker.read_log()
        assert "node 0 stopped the group" in worker.read_log()


def test_a_worker_that_dies_gives_clear_errors_and_node_0_lives(tessera_bin, demo_dir, tmp_path):
    with two_nodes(tessera_bin, demo_dir, tmp_path) as (node0, worker):
        assert greedy(node0, "Hello").status_code == 200
        worker.proc.send_signal(signal.SIGKILL)
        worker.wait(10)
        r = greedy(node0, "Hello")
        assert r.status_code >= 500, r.text
        assert "rank 1 at 127.0.0.1" in r.text, r.text
        assert node0.proc.poll() is None, node0.read_log()  # still running
        health = requests.get(node0.url + "/health", timeout=10)
        assert health.status_code != 200, health.text
        assert node0.stop() == 0, node0.read_log()
        log = node0.read_log()
        assert "rank 1 at 127.0.0.1" in log and "cannot be built again" in log, log


def test_a_worker_whose_node_0_dies_exits_with_the_reason(tessera_bin, demo_dir, tmp_path):
    with two_nodes(tessera_bin, demo_dir, tmp_path) as (node0, worker):
        assert greedy(node0, "Hello").status_code == 200
        node0.proc.send_signal(signal.SIGKILL)
        node0.stop()
        assert worker.wait(30) == 1, worker.read_log()
        log = worker.read_log()
        assert "rank 0 at 127.0.0.1" in log and "closed the connection" in log, log


def test_nodes_that_disagree_are_refused_on_both(tessera_bin, demo_dir, tmp_path):
    port = free_port()
    worker = Worker(tessera_bin, demo_dir, tmp_path / "node1.log", port, "--cache-block-seq-len", "32")
    try:
        log0 = tmp_path / "node0.log"
        with open(log0, "w") as out:
            node0 = subprocess.run([str(tessera_bin), "serve", "api_server", str(demo_dir), "--server-port", "0",
                                    *node_args(port, 0)], stdout=out, stderr=subprocess.STDOUT, timeout=120)
        text = log0.read_text()
        assert node0.returncode != 0, text
        assert "KV blocks of 32 tokens" in text and "KV blocks of 64 tokens" in text, text
        assert "hint:" in text and "same model, --tp, --nnodes" in text, text
        assert worker.wait(60) != 0
        assert "node 0 refused node 1" in worker.read_log(), worker.read_log()
    finally:
        worker.kill()


def test_tp_that_does_not_split_over_the_nodes_is_a_usage_error(tessera_bin, demo_dir):
    r = subprocess.run([str(tessera_bin), "serve", "api_server", str(demo_dir), "--backend", "cpu", "--tp", "3",
                        "--nnodes", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "--tp 3 does not split over --nnodes 2" in r.stderr and "--tp 2, 4" in r.stderr, r.stderr


def test_a_worker_without_node_0_gives_up_with_the_address(tessera_bin, demo_dir, tmp_path):
    port = free_port()
    worker = Worker(tessera_bin, demo_dir, tmp_path / "node1.log", port, env={"TESSERA_RENDEZVOUS_TIMEOUT": "2"})
    try:
        assert worker.wait(60) == 1, worker.read_log()
        log = worker.read_log()
        assert f"meeting the other nodes at 127.0.0.1:{port} (waiting up to 2 s)" in log, log
        assert f"cannot connect to node 0 at 127.0.0.1:{port}" in log, log
        assert "--master-addr and --master-port" in log, log
    finally:
        worker.kill()
