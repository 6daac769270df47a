"""A few hundred bad requests, generated here, against the real server on the demo model: broken JSON at every
truncation point of a valid body, wrong types and out-of-range numbers for every field, NaN/Infinity, empty and
unknown messages, content of wrong shapes, invalid UTF-8, deep nesting, 10 MB bodies, wrong content types,
malformed HTTP, and slow clients (byte by byte, stopping mid-body). Every answer is a 4xx with an OpenAI error
body, none takes longer than a bounded timeout, and afterwards the server still serves."""

import concurrent.futures
import json
import socket
import time

import pytest
import requests

from test_server_helpers import Server, make_demo_model

CHAT = {"model": "demo", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
COMPLETION = {"model": "demo", "prompt": "Once", "max_tokens": 4}
READ_TIMEOUT = 2  # the server's --read-timeout-seconds here: a stalled request ends this fast
ANSWER_TIMEOUT = 15  # no answer may take longer than this


@pytest.fixture(scope="module")
def server(tessera_bin, tmp_path_factory):
    demo = make_demo_model(tessera_bin, tmp_path_factory.mktemp("bad") / "demo")
    s = Server(tessera_bin, demo, tmp_path_factory.mktemp("bad-log") / "server.log",
               "--read-timeout-seconds", READ_TIMEOUT, "--max-request-bytes", 1 << 20)
    yield s
    assert s.stop() == 0, s.read_log()


def request_bytes(path, body, content_type="application/json", extra=b""):
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n").encode()
    if content_type is not None:
        head += f"Content-Type: {content_type}\r\n".encode()
    return head + extra + b"\r\n" + body


def read_response(sock):
    """(status, body) of one HTTP response; status None when the connection closed without one."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return None, data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), None)
    while length is not None and len(body) < length:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        body += chunk
    return status, body


def exchange(port, raw, pieces=1, pause=0.0, stop_after=None, half_close=False):
    """Sends raw (in `pieces` parts with `pause` seconds between them; only its first `stop_after` bytes when
    given), then reads the answer. Returns (status, body, seconds)."""
    start = time.time()
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT) as sock:
        data = raw if stop_after is None else raw[:stop_after]
        step = max(1, -(-len(data) // pieces))
        try:
            for i in range(0, len(data), step):
                sock.sendall(data[i:i + step])
                if pause:
                    time.sleep(pause)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered early (413, 400) and closed: read that answer
        status, body = read_response(sock)
    return status, body, time.time() - start


def check(results):
    """Failures among (name, status, body, seconds): not a 4xx, no OpenAI error body, or too slow."""
    bad = []
    for name, status, body, seconds in results:
        ok = status is not None and 400 <= status < 500 and seconds < ANSWER_TIMEOUT
        if ok:
            try:
                error = json.loads(body)["error"]
                ok = set(error) == {"message", "type", "param", "code"} and bool(error["message"])
            except (ValueError, KeyError, TypeError):
                ok = False
        if not ok:
            bad.append((name, status, body[:200], round(seconds, 2)))
    return bad


def assert_all_4xx(results):
    bad = check(results)
    assert not bad, f"{len(bad)} of {len(results)} answers were wrong:\n" + "\n".join(map(repr, bad))


def run_cases(server, cases, workers=2):
    """cases: (name, raw bytes, exchange keyword arguments)."""
    def one(case):
        name, raw, kwargs = case
        return (name, *exchange(server.port, raw, **kwargs))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, cases))


def body_cases():
    """(name, path, body bytes): bodies that are wrong in JSON or in content."""
    cases = []
    for path, valid in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
        text = json.dumps(valid).encode()
        cases += [(f"{path} truncated at {i}", path, text[:i]) for i in range(len(text))]
    wrong = {"string": "abc", "object": {"a": 1}, "list": [1, 2], "bool": True, "float": 1.5, "number": 7}
    numeric_int = ["max_tokens", "max_completion_tokens", "min_tokens", "top_k", "n", "seed", "top_logprobs"]
    numeric_float = ["temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"]
    booleans = ["stream", "ignore_eos", "skip_special_tokens", "logprobs", "add_generation_prompt"]
    types = {**{f: ["string", "object", "list", "bool"] for f in numeric_int + numeric_float},
             **{f: ["string", "object", "list", "number"] for f in booleans},
             "model": ["number", "object", "list", "bool"], "messages": ["string", "object", "number", "bool"],
             "stop": ["number", "object", "bool"], "stop_token_ids": ["string", "object", "number"],
             "stream_options": ["string", "list", "number"], "response_format": ["string", "list", "number"],
             "tools": ["string", "object", "number"]}
    for field, kinds in types.items():
        for kind in kinds:
            cases.append((f"chat {field}={kind}", "/v1/chat/completions", dict(CHAT, **{field: wrong[kind]})))
            if field not in ("messages", "max_completion_tokens", "top_logprobs", "logprobs", "add_generation_prompt", "tools",
                             "response_format"):
                cases.append((f"completion {field}={kind}", "/v1/completions", dict(COMPLETION, **{field: wrong[kind]})))
    for kind in ("number", "object", "bool", "float"):
        cases.append((f"completion prompt={kind}", "/v1/completions", dict(COMPLETION, prompt=wrong[kind])))
        cases.append((f"completion logprobs={kind}", "/v1/completions", dict(COMPLETION, logprobs=wrong[kind] if kind != "number" else "x")))
    out_of_range = {
        "max_tokens": [0, -1, -2**63, 2**63, 10**30, 1e308, -1e308], "max_completion_tokens": [0, -5, 10**40],
        "min_tokens": [-1, 10**30], "temperature": [-0.1, -1e308, 2.5, 1e308], "top_p": [0, -1, 1.01, 1e308],
        "top_k": [-2, -10**20, 10**20], "min_p": [-0.5, 1.5], "repetition_penalty": [0, -1, 1e308],
        "presence_penalty": [-3, 3, 1e308], "frequency_penalty": [-2.5, 1e300], "n": [0, -1, 129, 10**9],
        "seed": [10**30, -10**30, 1.5], "top_logprobs": [-1, 21, 10**12], "stop_token_ids": [[-1], [2**40], [1.5]],
    }
    for field, values in out_of_range.items():
        for v in values:
            body = dict(CHAT, **{field: v}, **({"logprobs": True} if field == "top_logprobs" else {}))
            cases.append((f"chat {field}={v}", "/v1/chat/completions", body))
            if field not in ("top_logprobs", "max_completion_tokens"):  # chat-only fields
                cases.append((f"completion {field}={v}", "/v1/completions", dict(COMPLETION, **{field: v})))
    for literal in ("NaN", "Infinity", "-Infinity", "nan", "inf", "1e999", "-1e999", "0x10", "+1", "01", "1.", ".5"):
        for field in ("temperature", "max_tokens", "top_p", "seed"):
            raw = json.dumps(CHAT)[:-1] + f', "{field}": {literal}}}'
            cases.append((f"chat {field}: {literal}", "/v1/chat/completions", raw.encode()))
    messages = [[], {}, "hi", [None], [[]], ["hi"], [{}], [{"role": "user"}], [{"content": "hi"}],
                [{"role": "", "content": "hi"}], [{"role": "robot", "content": "hi"}], [{"role": "USER", "content": "hi"}],
                [{"role": 5, "content": "hi"}], [{"role": None, "content": "hi"}], [{"role": ["user"], "content": "hi"}]]
    contents = [5, 1.5, True, {}, {"text": "hi"}, [1], [[]], [None], [{}], [{"type": "text"}], [{"text": "hi"}],
                [{"type": "text", "text": 5}], [{"type": "video", "video": "x"}], [{"type": 5, "text": "hi"}], ["hi"]]
    cases += [(f"messages={m}", "/v1/chat/completions", dict(CHAT, messages=m)) for m in messages]
    cases += [(f"content={c}", "/v1/chat/completions", dict(CHAT, messages=[{"role": "user", "content": c}]))
              for c in contents]
    cases += [(f"prompt={p}", "/v1/completions", dict(COMPLETION, prompt=p))
              for p in ([], [[]], [None], [1, -1], [2**31], [1.5], [[1], []], {"a": 1}, ["a", 5], ["a", [1]])]
    for bad in (b"\xff", b"\xc3\x28", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80", b"\xfe\xff"):
        cases.append((f"utf8 {bad} in content", "/v1/chat/completions",
                      b'{"model": "demo", "messages": [{"role": "user", "content": "a' + bad + b'b"}]}'))
        cases.append((f"utf8 {bad} in model", "/v1/completions", b'{"model": "de' + bad + b'", "prompt": "x"}'))
        cases.append((f"utf8 {bad} in prompt", "/v1/completions", b'{"model": "demo", "prompt": "x' + bad + b'"}'))
        cases.append((f"utf8 {bad} as body", "/v1/chat/completions", bad + json.dumps(CHAT).encode()))
        cases.append((f"utf8 {bad} in a key", "/v1/chat/completions", json.dumps(CHAT)[:-1].encode() + b', "' + bad + b'": 1}'))
    for escape in (r"\ud800", r"\udc00", r"\ud800\u0041", r"\u12", r"\x41", "\\"):
        cases.append((f"escape {escape}", "/v1/chat/completions",
                      ('{"model": "demo", "messages": [{"role": "user", "content": "a' + escape + '"}]}').encode()))
    for depth in (1000, 100000):
        cases.append((f"nested lists {depth}", "/v1/chat/completions", b"[" * depth + b"]" * depth))
        cases.append((f"nested objects {depth}", "/v1/completions", b'{"a":' * depth + b"1" + b"}" * depth))
        cases.append((f"nested stop {depth}", "/v1/chat/completions",
                      json.dumps(CHAT)[:-1].encode() + b', "stop": ' + b"[" * depth + b"]" * depth + b"}"))
        cases.append((f"nested content {depth}", "/v1/chat/completions",
                      b'{"model": "demo", "messages": [{"role": "user", "content": ' + b"[" * depth + b"]" * depth + b"}]}"))
    # Structured output: schemas that are malformed, cyclic, too wide or use
    # keywords that cannot be enforced, and bad guided_* fields.
    schemas = [5, "s", [], {"type": 5}, {"type": []}, {"type": "strin"}, {"minLength": "x"}, {"maxItems": -1},
               {"type": "object", "properties": []}, {"type": "object", "required": "a"}, {"enum": 5}, {"enum": []},
               {"anyOf": {}}, {"anyOf": []}, {"allOf": [{}, {}]}, {"items": 5}, {"$ref": 5}, {"$ref": "#/nowhere"},
               {"$ref": "http://x/y"}, {"$ref": "#/a~2"},
               {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
               {"enum": list(range(100))}, {"properties": {str(i): {} for i in range(100)}},
               {"anyOf": [{"anyOf": [{"type": ["string", "null", "integer"]}] * 30}] * 30},
               {"type": "string", "pattern": "^(a"}, {"type": "string", "pattern": "(a|b)*a(a|b){20}"},
               {"type": "string", "format": "iri"}, {"type": "string", "pattern": 5},
               {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}},
               {"type": "number", "minimum": 1e300}, {"type": "array", "prefixItems": 5},
               {"type": "string", "minLength": 5, "maxLength": 2}, False]
    for i, schema in enumerate(schemas):
        fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        cases.append((f"response_format schema {i}", "/v1/chat/completions", dict(CHAT, response_format=fmt)))
        cases.append((f"guided_json {i}", "/v1/completions", dict(COMPLETION, guided_json=schema)))
        cases.append((f"structured_outputs json {i}", "/v1/chat/completions",
                      dict(CHAT, structured_outputs={"json": schema})))
    for value in ([], [""], [5], "yes", {"a": 1}, ["x"] * 65):
        cases.append((f"guided_choice={value}", "/v1/completions", dict(COMPLETION, guided_choice=value)))
    # LMDeploy's regex_schema and vLLM's structured_outputs: wrong types, hostile patterns, unknown keys.
    for i, pattern in enumerate([5, None, "(a", "(?<=a)b", "(a|b)*a(a|b){20}", "a{1,100000}", "\\1", "[z-a]"]):
        cases.append((f"regex_schema {i}", "/v1/chat/completions",
                      dict(CHAT, response_format={"type": "regex_schema", "regex_schema": pattern})))
        if pattern is not None:
            cases.append((f"structured_outputs regex {i}", "/v1/completions",
                          dict(COMPLETION, structured_outputs={"regex": pattern})))
    for i, outputs in enumerate([5, "json", [], {}, {"json_object": "yes"}, {"grammar": "root ::= x"},
                                 {"choice": []}, {"choice": "a"}, {"json": "{"}, {"regex": "a", "json": {}},
                                 {"json_object": True, "choice": ["a"]}, {"disable_any_whitespace": 1, "json": {}},
                                 {"unknown": 1}, {"json_object": False}]):
        cases.append((f"structured_outputs {i}", "/v1/chat/completions", dict(CHAT, structured_outputs=outputs)))
    cases += [("tool_choice required without tools", "/v1/chat/completions", dict(CHAT, tool_choice="required"))]
    cases += [("body null", "/v1/chat/completions", b"null"), ("body list", "/v1/completions", b"[]"),
              ("body string", "/v1/chat/completions", b'"x"'), ("body number", "/v1/completions", b"5"),
              ("two objects", "/v1/chat/completions", json.dumps(CHAT).encode() * 2),
              ("trailing garbage", "/v1/completions", json.dumps(COMPLETION).encode() + b" x"),
              ("duplicate-free empty object", "/v1/completions", b"{}"),
              ("encode input=5", "/v1/encode", b'{"input": 5}'), ("encode input=[1]", "/v1/encode", b'{"input": [1]}'),
              ("encode broken", "/v1/encode", b'{"input": '), ("nul byte", "/v1/completions", b'{"model": "demo",\x00}')]
    return [(name, path, body if isinstance(body, bytes) else json.dumps(body).encode()) for name, path, body in cases]


def test_bad_bodies_get_4xx(server):
    cases = [(name, request_bytes(path, body), {}) for name, path, body in body_cases()]
    assert len(cases) >= 300
    assert_all_4xx(run_cases(server, cases))


def test_wrong_content_types_get_415(server):
    body = json.dumps(CHAT).encode()
    types = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml",
             "text/json", "application/jsonx", "image/png", "", ";", "application/json-patch"]
    cases = [(f"content type {t!r} {path}", request_bytes(path, body, t), {})
             for t in types for path in ("/v1/chat/completions", "/v1/completions", "/v1/encode")]
    results = run_cases(server, cases)
    assert_all_4xx(results)
    assert [r for r in results if r[1] != 415] == []
    # JSON under its own names is accepted.
    for t in ("application/json", "application/json; charset=utf-8", "Application/JSON", "application/vnd.x+json", None):
        status, answer, _ = exchange(server.port, request_bytes("/v1/chat/completions", body, t))
        assert status == 200, (t, answer)


def test_bodies_over_the_limit_get_413(server):
    ten_mb = json.dumps(dict(CHAT, messages=[{"role": "user", "content": "a" * (10 << 20)}])).encode()
    chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(b"100000\r\n" + b"a" * (1 << 20) + b"\r\n" for _ in range(10))
               + b"0\r\n\r\n")
    cases = [("10 MB chat", request_bytes("/v1/chat/completions", ten_mb), {}),
             ("10 MB of nesting", request_bytes("/v1/completions", b"[" * (10 << 20)), {}),
             ("10 MB chunked", chunked, {}),
             ("a length that says 10 MB", request_bytes("/v1/completions", b"{}")
              .replace(b"Content-Length: 2", f"Content-Length: {10 << 20}".encode()), {"stop_after": 300})]
    results = run_cases(server, cases)
    assert_all_4xx(results)
    assert [r for r in results if r[1] != 413] == []


def test_malformed_http_gets_400(server):
    good = request_bytes("/v1/completions", json.dumps(COMPLETION).encode())
    raws = {
        "garbage": b"hello there\r\n\r\n", "no version": b"POST /v1/completions\r\n\r\n",
        "bad version": good.replace(b"HTTP/1.1", b"HTTP/9.9", 1), "space in target": good.replace(b"/v1/", b"/v 1/", 1),
        "bad length": good.replace(b"Content-Length: ", b"Content-Length: x", 1),
        "negative length": good.replace(b"Content-Length: ", b"Content-Length: -", 1),
        "huge length": good.replace(b"Content-Length: ", b"Content-Length: 99999999999999999999", 1),
        "two lengths": good.replace(b"Content-Length:", b"Content-Length: 3\r\nContent-Length:", 1),
        "length and chunked": good.replace(b"Content-Length:", b"Transfer-Encoding: chunked\r\nContent-Length:", 1),
        "bad chunk size": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        "header without colon": good.replace(b"Host: 127.0.0.1", b"Host 127.0.0.1", 1),
        "nul in header": good.replace(b"Host: 127.0.0.1", b"Host: 127\x00.0.0.1", 1),
        "header over 64 KB": good.replace(b"Host: 127.0.0.1", b"X-Big: " + b"a" * (70 << 10), 1),
        "bad method": good.replace(b"POST", b"P\x01ST", 1), "bare LF": b"GET /health HTTP/1.1\nHost: x\n\n",
    }
    results = run_cases(server, [(name, raw, {}) for name, raw in raws.items()])
    assert_all_4xx(results)


def test_slow_clients_are_answered_and_do_not_block_others(server):
    broken = request_bytes("/v1/chat/completions", json.dumps(CHAT).encode()[:-3])
    wrong_type = request_bytes("/v1/completions", json.dumps(dict(COMPLETION, max_tokens="x")).encode())
    head_len = broken.index(b"\r\n\r\n") + 4
    cases = [
        # Byte by byte with pauses, within the read timeout: answered as usual.
        ("headers byte by byte", broken, {"pieces": head_len, "pause": 0.004}),
        ("body byte by byte", wrong_type, {"pieces": len(wrong_type), "pause": 0.003}),
        ("in three pieces", broken, {"pieces": 3, "pause": 0.3}),
        # Stopping mid-body (mid-headers): 408 once the read timeout passes.
        ("stops mid-body", broken, {"stop_after": head_len + 10}),
        ("stops mid-headers", broken, {"stop_after": 30}),
        ("stops after the request line", broken, {"stop_after": broken.index(b"\r\n") + 2}),
        # Too slow: the timeout ends it with 408, however slowly it keeps sending.
        ("headers slower than the timeout", broken, {"pieces": 8, "pause": READ_TIMEOUT / 3}),
        # Closing its sending side mid-body: 400 for an incomplete request.
        ("half-closes mid-body", broken, {"stop_after": head_len + 10, "half_close": True}),
        ("half-closes mid-headers", broken, {"stop_after": 40, "half_close": True}),
    ]
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(len(cases) + 1) as pool:
        slow = [pool.submit(exchange, server.port, raw, **kwargs) for _, raw, kwargs in cases]
        # Meanwhile the server answers others at once.
        time.sleep(0.2)
        r = requests.get(server.url + "/health", timeout=5)
        assert r.status_code == 200 and time.time() - start < 1.5
        results = [(name, *f.result(timeout=ANSWER_TIMEOUT + 5)) for (name, _, _), f in zip(cases, slow)]
    assert_all_4xx(results)
    statuses = {name: status for name, status, _, _ in results}
    for name in ("stops mid-body", "stops mid-headers", "stops after the request line", "headers slower than the timeout"):
        assert statuses[name] == 408, results
    # Clients that vanish mid-body leave nothing behind.
    for stop_after in (10, head_len, head_len + 5):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(broken[:stop_after])


def test_the_server_still_serves_after_the_suite(server):
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
    r = requests.post(server.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None
    r = requests.post(server.url + "/v1/completions", json=dict(COMPLETION, stream=True), timeout=30)
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")
    log = server.read_log()
    assert " 500 " not in log and "internal error" not in log, log[-3000:]
