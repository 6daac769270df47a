"""Every `curl` command in README.md's code blocks, as written (only the port changed), against the server on the
demo model, which the README serves as "demo-model": each gets a 2xx with a JSON body or an SSE stream."""

import json
import re
import shlex
import subprocess

import pytest

from conftest import ROOT
from test_server_helpers import Server, make_demo_model


def readme_curl_commands():
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```(?:sh|bash|console|shell)?\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)  # backslash continuations
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("curl "):
                commands.append(line)
    return commands


def test_the_readme_has_curl_examples():
    assert len(readme_curl_commands()) >= 2


@pytest.fixture(scope="module")
def server(tessera_bin, tmp_path_factory):
    demo = make_demo_model(tessera_bin, tmp_path_factory.mktemp("readme") / "demo-model")
    s = Server(tessera_bin, demo, tmp_path_factory.mktemp("readme-log") / "server.log", model_name="demo-model")
    yield s
    assert s.stop() == 0, s.read_log()


@pytest.mark.parametrize("command", readme_curl_commands())
def test_readme_curl_example_works(server, command, tmp_path):
    assert "23333" in command, command
    command = command.replace("23333", str(server.port))
    body = tmp_path / "body"
    # Only where the answer goes is added: the request is the README's.
    run = subprocess.run(["bash", "-c", f"{command} -sS -o {shlex.quote(str(body))} -w '%{{http_code}}'"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    status = int(run.stdout.strip())
    answer = body.read_text()
    assert 200 <= status < 300, (status, answer)
    if answer.startswith("data: "):
        events = [line[len("data: "):] for line in answer.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]", answer
        chunks = [json.loads(e) for e in events[:-1]]
        assert chunks and all(c["model"] == "demo-model" for c in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    else:
        reply = json.loads(answer)
        assert "error" not in reply, reply
        assert reply["choices"][0]["finish_reason"] in ("stop", "length"), reply
