"""/v1/completions with echo: the prompt leads the text, and with logprobs each prompt token after the
first is scored (what lm-evaluation-harness's loglikelihood tasks send: echo, logprobs, max_tokens 1).

The reference is analytic: a scripted model (scripted_model.py) whose residual stream is a one-hot
direction per token, so RMSNorm scales it to 1 / sqrt(1 / hidden + eps) and the LM head gives that
logit to the token's successor in the chain and 0 to every other token of the vocabulary."""

import json
import math

import openai
import pytest

from scripted_model import scripted_model
from test_server_helpers import Server

CHAIN = [("Alpha", False), ("Beta", False), ("Gamma", False), ("</s>", True)]


@pytest.fixture(scope="module")
def scripted(tessera_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("echo")
    model = scripted_model(tessera_bin, root, CHAIN, [])
    config = json.loads((model / "config.json").read_text())
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    s = Server(tessera_bin, model, root / "server.log")
    yield s, config, ids
    assert s.stop() == 0, s.read_log()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=60, max_retries=0)


def test_echo_puts_the_prompt_first(scripted):
    server, _, _ = scripted
    plain = client(server).completions.create(model="demo", prompt="Once upon", max_tokens=3, temperature=0)
    echoed = client(server).completions.create(model="demo", prompt="Once upon", max_tokens=3, temperature=0,
                                               echo=True)
    assert echoed.choices[0].text == "Once upon" + plain.choices[0].text
    streamed = "".join(c.choices[0].text for c in client(server).completions.create(
        model="demo", prompt="Once upon", max_tokens=3, temperature=0, echo=True, stream=True))
    assert streamed == echoed.choices[0].text


def test_echo_logprobs_score_each_prompt_token(scripted):
    server, config, ids = scripted
    other = 40  # a byte piece, outside the chain: its successor is the chain's first token
    prompt = [other, ids["Alpha"], ids["Beta"], other, ids["Gamma"]]
    r = client(server).completions.create(model="demo", prompt=prompt, max_tokens=1, temperature=0, echo=True,
                                          logprobs=2)
    lp = r.choices[0].logprobs
    # The prompt's tokens, then the one completion token: </s>, Gamma's successor, a stop token, listed
    # (not in the text) because the reader of a scored echo drops the last entry as the generated one.
    assert len(lp.tokens) == len(prompt) + 1 and lp.tokens[1:3] == ["Alpha", "Beta"] and lp.tokens[-1] == "</s>"
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    scale = 1 / math.sqrt(1 / config["hidden_size"] + config["rms_norm_eps"])
    log_total = math.log(math.exp(scale) + config["vocab_size"] - 1)
    successor, not_successor = scale - log_total, -log_total
    # Alpha follows `other`, Beta follows Alpha: each is its predecessor's successor; `other` after
    # Beta and Gamma after `other` are not.
    want = [successor, successor, not_successor, not_successor]
    assert lp.token_logprobs[1:5] == pytest.approx(want, abs=1e-4)
    assert lp.token_logprobs[5] == pytest.approx(successor, abs=1e-4)  # temperature 0: the raw distribution
    # The likeliest alternative at each position is the successor itself.
    assert [max(t, key=t.get) for t in lp.top_logprobs[1:5]] == ["Alpha", "Beta", "Gamma", "Alpha"]
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == "%AlphaBeta%Gamma"
    # Streamed, the same logprobs arrive with the echo's chunk.
    chunks = list(client(server).completions.create(model="demo", prompt=prompt, max_tokens=1, temperature=0,
                                                    echo=True, logprobs=2, stream=True))
    first = chunks[0].choices[0].logprobs
    assert first.token_logprobs[1:5] == pytest.approx(want, abs=1e-4)


def test_without_logprobs_nothing_is_scored_and_the_prefix_cache_still_serves(scripted):
    server, _, ids = scripted
    prompt = [40, ids["Alpha"]]
    for _ in range(2):
        r = client(server).completions.create(model="demo", prompt=prompt, max_tokens=2, temperature=0, echo=True)
        assert r.choices[0].logprobs is None
        assert r.choices[0].text.endswith("AlphaBetaGamma")


def test_a_loglikelihood_batch_as_lm_evaluation_harness_sends_it(scripted):
    """Several token-id prompts in one request, echo, logprobs 1, max_tokens 1, temperature 0: each
    choice lists its prompt's tokens and the one generated token, which the reader drops."""
    server, _, ids = scripted
    prompts = [[40, ids["Alpha"], ids["Beta"]], [41, 42, ids["Gamma"], 43]]
    r = client(server).completions.create(model="demo", prompt=prompts, max_tokens=1, temperature=0, echo=True,
                                          logprobs=1, seed=1234)
    assert [len(c.logprobs.tokens) for c in r.choices] == [len(p) + 1 for p in prompts]
    for choice, prompt in zip(r.choices, prompts):
        scored = choice.logprobs.token_logprobs[1:-1]
        assert len(scored) == len(prompt) - 1 and all(isinstance(x, float) and x < 0 for x in scored)
    # Alpha after 40 and Beta after Alpha are each the model's first choice: "is greedy" holds.
    first = r.choices[0].logprobs
    assert [max(t, key=t.get) for t in first.top_logprobs[1:3]] == first.tokens[1:3]


def test_max_tokens_zero_scores_the_prompt_and_generates_nothing(scripted):
    server, _, ids = scripted
    prompt = [40, ids["Alpha"], ids["Beta"]]
    r = client(server).completions.create(model="demo", prompt=prompt, max_tokens=0, temperature=0, echo=True,
                                          logprobs=1)
    choice = r.choices[0]
    assert choice.text == "%AlphaBeta" and choice.finish_reason == "length"
    assert len(choice.logprobs.tokens) == len(prompt) and choice.logprobs.token_logprobs[0] is None
    assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == len(prompt)
    with pytest.raises(openai.BadRequestError) as e:
        client(server).completions.create(model="demo", prompt=prompt, max_tokens=0)
    assert e.value.body["param"] == "max_tokens" and "echo" in e.value.body["message"]
