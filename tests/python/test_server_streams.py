"""64 streaming clients at once with 10% of them vanishing mid-stream: the rest get complete streams with their
tokens in order (the same text as the request alone, greedy), and afterwards /metrics shows every KV block free."""

import concurrent.futures
import json
import socket
import time

import pytest
import requests

from test_server_helpers import Server, make_demo_model, metric

CLIENTS = 64
VANISHING = 7  # 10% and a bit
PROMPTS = [f"Story {i}:" for i in range(8)]


@pytest.fixture(scope="module")
def server(tessera_bin, tmp_path_factory):
    demo = make_demo_model(tessera_bin, tmp_path_factory.mktemp("streams") / "demo")
    s = Server(tessera_bin, demo, tmp_path_factory.mktemp("streams-log") / "server.log")
    yield s
    assert s.stop() == 0, s.read_log()


def body(prompt, max_tokens, stream):
    return {"model": "demo", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": stream, "stream_options": {"include_usage": True} if stream else None}


def full_stream(server, prompt):
    r = requests.post(server.url + "/v1/completions", json=body(prompt, 24, True), stream=True, timeout=60)
    assert r.status_code == 200, r.text
    events = [line[len(b"data: "):] for line in r.iter_lines() if line.startswith(b"data: ")]
    return events


def vanish(server, prompt):
    """Starts a long stream, reads two events, and closes the connection."""
    raw = json.dumps(body(prompt, 2000, True))
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(raw)}\r\n\r\n{raw}").encode())
        received = b""
        while received.count(b"data: ") < 2:
            chunk = s.recv(4096)
            assert chunk, "the stream ended before the client vanished"
            received += chunk
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset, like a crash
    return None


def test_vanishing_clients_free_their_blocks_and_the_others_complete_in_order(server):
    alone = {}
    for prompt in PROMPTS:
        r = requests.post(server.url + "/v1/completions", json=body(prompt, 24, False), timeout=60)
        alone[prompt] = r.json()["choices"][0]["text"]
    before = requests.get(server.url + "/metrics", timeout=10).text
    vanishing = set(range(0, CLIENTS, CLIENTS // VANISHING)[:VANISHING])
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        futures = {i: pool.submit(vanish if i in vanishing else full_stream, server, PROMPTS[i % len(PROMPTS)])
                   for i in range(CLIENTS)}
        results = {i: f.result(timeout=120) for i, f in futures.items()}
    assert len(vanishing) == VANISHING
    for i, events in results.items():
        if i in vanishing:
            continue
        assert events[-1] == b"[DONE]", (i, events[-3:])
        chunks = [json.loads(e) for e in events[:-1]]
        usage = chunks[-1]["usage"]
        assert usage["completion_tokens"] == 24, (i, usage)
        with_choices = [c for c in chunks if c["choices"]]
        finishes = [c["choices"][0]["finish_reason"] for c in with_choices]
        assert finishes[-1] == "length" and all(f is None for f in finishes[:-1]), (i, finishes)
        text = "".join(c["choices"][0]["text"] for c in with_choices)
        assert text == alone[PROMPTS[i % len(PROMPTS)]], i  # every piece, in order

    aborted = 'tessera_request_finished_total{reason="abort"}'
    deadline = time.time() + 20
    while True:
        text = requests.get(server.url + "/metrics", timeout=10).text
        freed = (metric(text, "tessera_kv_blocks_used") == 0 and metric(text, "tessera_requests_in_flight") == 0
                 and metric(text, aborted) - metric(before, aborted) >= VANISHING)
        if freed or time.time() > deadline:
            break
        time.sleep(0.1)
    assert freed, text
    assert metric(text, "tessera_kv_blocks_total") > 0
    # The vanished requests were aborted, not run to their end.
    length = 'tessera_request_finished_total{reason="length"}'
    assert metric(text, length) - metric(before, length) == CLIENTS - VANISHING, text
    assert metric(text, "tessera_client_disconnects_total") - metric(before, "tessera_client_disconnects_total") >= VANISHING
    r = requests.post(server.url + "/v1/completions", json=body(PROMPTS[0], 24, False), timeout=60)
    assert r.json()["choices"][0]["text"] == alone[PROMPTS[0]]
