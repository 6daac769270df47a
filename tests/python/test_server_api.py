"""The real server over plain HTTP: what clients get wrong gets a 4xx with an
OpenAI error body and the server keeps serving; health, metrics, encode, CORS,
API keys, a client that vanishes mid-stream, and SIGTERM."""

import json
import socket
import time

import pytest
import requests

from test_server_helpers import Server, make_demo_model, metric

CHAT = {"model": "demo", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def demo_dir(tessera_bin, tmp_path_factory):
    return make_demo_model(tessera_bin, tmp_path_factory.mktemp("api") / "demo")


@pytest.fixture(scope="module")
def server(tessera_bin, demo_dir, tmp_path_factory):
    s = Server(tessera_bin, demo_dir, tmp_path_factory.mktemp("api-log") / "server.log")
    yield s
    assert s.stop() == 0, s.read_log()


def post(server, path, body, headers=None):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(server.url + path, data=data, timeout=60,
                         headers={"Content-Type": "application/json", **(headers or {})})


def assert_error(response, status):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["message"]
    return error


BAD_CHAT_BODIES = [
    b"", b"{", b"not json", b"[]", b"null", b'{"model": "demo"', b"\xff\xfe\x00",
    b'{"model": "demo", "messages": [{"role": "user", "content": "\xc3\x28"}]}',
    {"model": "demo"}, {"model": "demo", "messages": []}, {"model": "demo", "messages": "hi"},
    {"model": "demo", "messages": [{"role": "robot", "content": "hi"}]},
    {"model": "demo", "messages": [{"content": "hi"}]},
    {"model": "demo", "messages": [{"role": "user", "content": 5}]},
    {"messages": CHAT["messages"]}, {"model": 5, "messages": CHAT["messages"]},
    dict(CHAT, max_tokens=-1), dict(CHAT, max_tokens=0), dict(CHAT, max_tokens="10"), dict(CHAT, max_tokens=1e40),
    dict(CHAT, max_tokens=10**30), dict(CHAT, temperature=-1), dict(CHAT, temperature="hot"),
    dict(CHAT, top_p=0), dict(CHAT, top_p=2), dict(CHAT, top_k=-5), dict(CHAT, n=129), dict(CHAT, stream="yes"),
    dict(CHAT, stop=7), dict(CHAT, stop=[None]), dict(CHAT, stop_token_ids=[-3]), dict(CHAT, stop_token_ids=[2**40]),
    dict(CHAT, seed="x"), dict(CHAT, logprobs=True, top_logprobs=50), dict(CHAT, top_logprobs=3),
    dict(CHAT, repetition_penalty=0), dict(CHAT, min_p=3), dict(CHAT, presence_penalty=10),
    dict(CHAT, stream_options=[]), dict(CHAT, logit_bias={"5": 101}), dict(CHAT, logit_bias={"x": 1}),
    dict(CHAT, logit_bias={"-1": 1}), dict(CHAT, logit_bias={"5": "high"}), dict(CHAT, logit_bias=[5]),
    dict(CHAT, logit_bias={"100000": 1}),
]


@pytest.mark.parametrize("body", BAD_CHAT_BODIES, ids=range(len(BAD_CHAT_BODIES)))
def test_bad_chat_bodies_get_400_with_an_error_body(server, body):
    assert_error(post(server, "/v1/chat/completions", body), 400)


@pytest.mark.parametrize("body", [
    {"model": "demo"}, {"model": "demo", "prompt": 5}, {"model": "demo", "prompt": []},
    {"model": "demo", "prompt": [1, -1]}, {"model": "demo", "prompt": [100000]}, {"model": "demo", "prompt": ["a", 5]},
    {"model": "demo", "prompt": ["a", "x " * 5000]},
    {"model": "demo", "prompt": "x", "logprobs": 50}, {"model": "demo", "prompt": "x", "echo": "yes"},
    {"model": "demo", "prompt": "x " * 5000},
])
def test_bad_completion_bodies_get_400(server, body):
    assert_error(post(server, "/v1/completions", body), 400)


def test_the_server_still_serves_after_the_bad_inputs(server):
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
    r = post(server, "/v1/chat/completions", CHAT)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None


def test_unknown_model_is_404_model_not_found(server):
    error = assert_error(post(server, "/v1/chat/completions", dict(CHAT, model="gpt-4")), 404)
    assert error["code"] == "model_not_found" and error["param"] == "model"


def test_prompt_longer_than_the_session_says_so(server):
    error = assert_error(post(server, "/v1/chat/completions",
                              dict(CHAT, messages=[{"role": "user", "content": "word " * 6000}])), 400)
    assert error["code"] == "context_length_exceeded"
    assert "session length" in error["message"]


def test_body_over_the_limit_is_413(server):
    big = json.dumps(dict(CHAT, messages=[{"role": "user", "content": "a" * (10 << 20)}]))
    assert_error(post(server, "/v1/chat/completions", big), 413)


def test_unknown_route_404_wrong_method_405(server):
    assert_error(requests.get(server.url + "/v2/nothing", timeout=10), 404)
    r = requests.get(server.url + "/v1/chat/completions", timeout=10)
    assert_error(r, 405)
    assert r.headers["Allow"] == "POST"


def test_health_and_models(server):
    r = requests.get(server.url + "/health", timeout=10)
    assert r.status_code == 200
    models = requests.get(server.url + "/v1/models", timeout=10).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "demo"


def test_encode_like_lmdeploy(server):
    one = post(server, "/v1/encode", {"input": "Once upon a time"}).json()
    assert one["length"] == len(one["input_ids"]) and one["input_ids"][0] == 1  # BOS
    no_bos = post(server, "/v1/encode", {"input": "Once upon a time", "add_bos": False}).json()
    assert no_bos["input_ids"] == one["input_ids"][1:]
    many = post(server, "/v1/encode", {"input": ["a", "b c"]}).json()
    assert len(many["input_ids"]) == 2 and many["length"] == [len(x) for x in many["input_ids"]]


def test_chat_prompt_is_not_given_a_second_bos(server):
    r = post(server, "/v1/chat/completions", dict(CHAT, messages=[{"role": "user", "content": "Once upon a time"}]))
    # The demo model's template is 'base' (contents only): the prompt is the text's ids, without BOS.
    plain = post(server, "/v1/encode", {"input": "Once upon a time", "add_bos": False}).json()
    assert r.json()["usage"]["prompt_tokens"] == plain["length"]


def test_metrics_count_requests_tokens_and_latencies(server):
    post(server, "/v1/completions", {"model": "demo", "prompt": "Hi", "max_tokens": 3, "ignore_eos": True})
    text = requests.get(server.url + "/metrics", timeout=10).text
    assert metric(text, 'tessera_http_requests_total{route="/v1/completions",code="200"}') >= 1
    assert metric(text, 'tessera_http_requests_total{route="/v1/chat/completions",code="400"}') >= 1
    assert metric(text, "tessera_prompt_tokens_total") > 0
    assert metric(text, "tessera_generation_tokens_total") >= 3
    assert metric(text, "tessera_time_to_first_token_seconds_count") >= 1
    assert metric(text, "tessera_inter_token_latency_seconds_count") >= 2
    assert metric(text, 'tessera_request_finished_total{reason="length"}') >= 1
    assert metric(text, "tessera_kv_blocks_total") > 0
    for name in ["tessera_num_requests_waiting", "tessera_num_requests_running", "tessera_kv_cache_usage_ratio",
                 "tessera_ready 1"]:
        assert name in text


def test_cors_headers_and_preflight(server):
    r = requests.get(server.url + "/v1/models", headers={"Origin": "http://example.com"}, timeout=10)
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    r = requests.options(server.url + "/v1/chat/completions", timeout=10, headers={
        "Origin": "http://example.com", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status_code == 200
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert r.headers["Access-Control-Allow-Headers"] == "authorization, content-type"


def wait_until(predicate, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_client_that_vanishes_mid_stream_aborts_its_request(server):
    before = requests.get(server.url + "/metrics", timeout=10).text
    body = json.dumps({"model": "demo", "prompt": "Once", "max_tokens": 4000, "stream": True, "ignore_eos": True})
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        received = b""
        while received.count(b"data: ") < 3:
            chunk = s.recv(4096)
            assert chunk, "the stream ended early"
            received += chunk
    aborted = 'tessera_request_finished_total{reason="abort"}'

    def aborted_and_freed():
        text = requests.get(server.url + "/metrics", timeout=10).text
        return (metric(text, aborted) > metric(before, aborted)
                and metric(text, "tessera_kv_blocks_used") == 0
                and metric(text, "tessera_requests_in_flight") == 0)
    assert wait_until(aborted_and_freed), requests.get(server.url + "/metrics", timeout=10).text
    text = requests.get(server.url + "/metrics", timeout=10).text
    assert metric(text, "tessera_client_disconnects_total") >= 1
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


def test_api_keys_guard_the_v1_routes(tessera_bin, demo_dir, tmp_path):
    s = Server(tessera_bin, demo_dir, tmp_path / "keys.log", "--api-keys", "key-one", "key-two")
    try:
        error = assert_error(post(s, "/v1/chat/completions", CHAT), 401)
        assert error["code"] == "invalid_api_key"
        assert_error(requests.get(s.url + "/v1/models", headers={"Authorization": "Bearer wrong"}, timeout=10), 401)
        for key in ("key-one", "key-two"):
            r = post(s, "/v1/chat/completions", CHAT, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200, r.text
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
    finally:
        assert s.stop() == 0


def test_sigterm_lets_the_request_in_flight_finish_then_exits_0(tessera_bin, demo_dir, tmp_path):
    s = Server(tessera_bin, demo_dir, tmp_path / "term.log")
    try:
        r = requests.post(s.url + "/v1/completions", stream=True, timeout=60, json={
            "model": "demo", "prompt": "Once", "max_tokens": 400, "stream": True, "ignore_eos": True})
        lines = r.iter_lines()
        assert next(line for line in lines if line).startswith(b"data: ")
        s.proc.send_signal(15)
        assert wait_until(lambda: "SIGTERM" in s.read_log(), 10)
        # New requests are refused while the one in flight goes on.
        refused = requests.get(s.url + "/health", timeout=10)
        assert refused.status_code == 503
        rest = [line for line in lines if line]
        assert rest[-1] == b"data: [DONE]"
        last = json.loads(rest[-2][len(b"data: "):])
        assert last["choices"][0]["finish_reason"] == "length"
        assert s.proc.wait(timeout=60) == 0
        assert "stopped" in s.read_log()
    finally:
        s.stop()


def test_a_thousand_connections_at_once_are_all_served(server):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    sockets = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sockets.append(s)
        for s in sockets:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        for s in sockets:
            response = b""
            while b"\r\n\r\n" not in response:
                chunk = s.recv(4096)
                assert chunk, "a connection was closed without an answer"
                response += chunk
            assert response.startswith(b"HTTP/1.1 200"), response
    finally:
        for s in sockets:
            s.close()
    text = requests.get(server.url + "/metrics", timeout=10).text
    assert metric(text, 'tessera_http_requests_total{route="/health",code="200"}') >= 1000
