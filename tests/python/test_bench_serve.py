"""`tessera bench serve` against the demo model on a loopback server: the report has every number, no request
fails and the output tokens are those the seeded lengths asked for; an unreachable URL is a clear error."""

import re
import socket
import subprocess

import pytest

from test_server_helpers import Server, env_timeout, make_demo_model

REQUESTS, OUTPUT_MEAN, SPREAD = 8, 8, 0.5


@pytest.fixture(scope="module")
def server(tessera_bin, tmp_path_factory):
    demo = make_demo_model(tessera_bin, tmp_path_factory.mktemp("bench-serve") / "demo")
    s = Server(tessera_bin, demo, tmp_path_factory.mktemp("bench-serve-log") / "server.log")
    yield s
    assert s.stop() == 0, s.read_log()


def number(text, label):
    match = re.search(rf"^{re.escape(label)}\s+([0-9.]+)", text, re.MULTILINE)
    assert match, f"no '{label}' line in:\n{text}"
    return float(match.group(1))


def test_bench_serve_reports_every_number(tessera_bin, server):
    out = subprocess.run([str(tessera_bin), "bench", "serve", "--url", server.url, "--concurrency", "4", "--requests",
                          str(REQUESTS), "--prompt-tokens", "16", "--output-tokens", str(OUTPUT_MEAN)],
                         capture_output=True, text=True, timeout=4 * env_timeout())
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "(model demo)" in text
    assert number(text, "requests") == REQUESTS
    assert number(text, "failures") == 0
    assert number(text, "wall time") > 0
    assert number(text, "requests/s") > 0
    assert number(text, "output tokens/s") > 0
    tokens = number(text, "output tokens")
    planned = int(re.search(r"planned: \d+ prompt, (\d+) output tokens", text).group(1))
    assert tokens == planned, text  # ignore_eos: every request gives exactly its drawn length
    assert REQUESTS * OUTPUT_MEAN * (1 - SPREAD) <= tokens <= REQUESTS * OUTPUT_MEAN * (1 + SPREAD), text
    for label in ("TTFT", "TPOT"):
        match = re.search(rf"^{label}\s+p50 ([0-9.]+) ms, p99 ([0-9.]+) ms", text, re.MULTILINE)
        assert match, text
        p50, p99 = map(float, match.groups())
        # A request's TPOT is 0 when every token after its first came in the
        # first token's SSE chunk (the server writes what one poll finds as one
        # chunk), which a fast server on outputs of 4-12 tokens can do.
        assert (0 < p50 if label == "TTFT" else 0 <= p50) and p50 <= p99, text


def test_bench_serve_unreachable_url_is_a_clear_error(tessera_bin):
    with socket.socket() as s:  # a loopback port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    out = subprocess.run([str(tessera_bin), "bench", "serve", "--url", url, "--requests", "2"],
                         capture_output=True, text=True, timeout=env_timeout())
    assert out.returncode != 0
    assert f"cannot reach the server at {url}" in out.stderr, out.stderr
    assert "tessera serve api_server" in out.stderr, out.stderr
