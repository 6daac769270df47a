"""`tessera bench serve` against the demo model on a loopback server: the report has every number, no request
fails and the output tokens are those the seeded lengths asked for; an unreachable URL is a clear error; streams
whose tokens decode to no text complete (against a stand-in server that sends such streams)."""

import http.server
import json
import re
import socket
import subprocess
import threading

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


class _TextlessStream(http.server.BaseHTTPRequestHandler):
    """Answers every completion with a stream whose tokens decode to no text: a finishing chunk, usage, [DONE]."""
    tokens = 5

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "silent", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        events = [{"choices": [{"index": 0, "text": "", "finish_reason": "length"}]},
                  {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": self.tokens,
                                            "total_tokens": 4 + self.tokens}}]
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


def test_bench_serve_counts_streams_without_text_as_completed(tessera_bin):
    # Tokens that decode to nothing (ids past a small tokenizer, special tokens) give a stream with no text
    # chunk: the request still completed and its tokens count, but it has no first-token time.
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TextlessStream)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        out = subprocess.run([str(tessera_bin), "bench", "serve", "--url", f"http://127.0.0.1:{httpd.server_port}",
                              "--concurrency", "2", "--requests", "3", "--output-tokens", "5", "--spread", "0"],
                             capture_output=True, text=True, timeout=env_timeout())
    finally:
        httpd.shutdown()
    assert out.returncode == 0, out.stdout + out.stderr
    assert number(out.stdout, "failures") == 0, out.stdout
    assert number(out.stdout, "output tokens") == 3 * _TextlessStream.tokens, out.stdout
    assert number(out.stdout, "without text") == 3, out.stdout
    assert "3 of 3 requests finished with tokens but sent no text" in out.stderr, out.stderr
