"""The real server on the demo model, through the official `openai` client:
chat and text completions, streaming and not, usage, stop strings, seeds and
logprobs."""

import concurrent.futures
import json
from pathlib import Path

import openai
import pytest

from test_server_helpers import Server, make_demo_model, serving


@pytest.fixture(scope="module")
def server(tessera_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("openai")
    yield from serving(Server(tessera_bin, make_demo_model(tessera_bin, root / "demo"), root / "server.log"))


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=60, max_retries=0)


MESSAGES = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "讲一个三国故事"}]


def test_models_lists_the_served_name(client):
    assert [m.id for m in client.models.list().data] == ["demo"]


def test_the_reports_request_returns_text(client):
    r = client.chat.completions.create(model="demo", messages=MESSAGES, temperature=0.7, top_p=0.8, max_tokens=40)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0
    assert r.usage.completion_tokens <= 40
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_max_tokens_ends_with_length(client):
    r = client.chat.completions.create(model="demo", messages=MESSAGES, max_tokens=7, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 7
    r = client.chat.completions.create(model="demo", messages=MESSAGES, max_completion_tokens=3, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3


def test_chat_stream_equals_the_whole_answer_and_reports_usage_last(client):
    whole = client.chat.completions.create(model="demo", messages=MESSAGES, max_tokens=30, temperature=0)
    chunks = list(client.chat.completions.create(model="demo", messages=MESSAGES, max_tokens=30, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_without_include_usage_has_no_usage_chunk(client):
    chunks = list(client.completions.create(model="demo", prompt="Once upon a time", max_tokens=5, stream=True))
    assert all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_completion_stream_equals_the_whole_answer(client):
    whole = client.completions.create(model="demo", prompt="Once upon a time", max_tokens=24, temperature=0)
    assert whole.object == "text_completion" and whole.choices[0].text
    chunks = list(client.completions.create(model="demo", prompt="Once upon a time", max_tokens=24, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text


def test_completion_accepts_token_ids(client):
    r = client.completions.create(model="demo", prompt=[1, 300, 301, 302], max_tokens=4, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == 4 and r.usage.completion_tokens == 4


def test_seed_makes_sampling_reproducible(client):
    def sample(seed):
        return client.completions.create(model="demo", prompt="Once", max_tokens=24, temperature=1.0, seed=seed,
                                         extra_body={"ignore_eos": True}).choices[0].text
    assert sample(7) == sample(7)
    assert len({sample(s) for s in (1, 2, 3, 4)}) > 1, "different seeds all gave the same text"


def test_stop_string_cuts_the_text_before_it(client):
    base = client.completions.create(model="demo", prompt="Once upon a time", max_tokens=40, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    start = next(i for i in range(5, len(base) - 3) if base.find(base[i:i + 3]) == i)
    stop = base[start:start + 3]
    for stream in (False, True):
        r = client.completions.create(model="demo", prompt="Once upon a time", max_tokens=40, temperature=0,
                                      stop=[stop, "never appears"], stream=stream, extra_body={"ignore_eos": True})
        if stream:
            chunks = list(r)
            text = "".join(c.choices[0].text for c in chunks)
            finish = chunks[-1].choices[0].finish_reason
        else:
            text, finish = r.choices[0].text, r.choices[0].finish_reason
        assert text == base[:start], (stream, stop, base)
        assert finish == "stop"


def test_stop_token_ids_end_generation_without_their_text(client):
    # Every id is a stop id: the first token ends the request, counted but not shown.
    r = client.completions.create(model="demo", prompt="Once upon a time", max_tokens=12, temperature=0,
                                  extra_body={"ignore_eos": True, "stop_token_ids": list(range(512))})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == ""
    assert r.usage.completion_tokens == 1


def test_logit_bias_forces_and_bans_tokens(client, server):
    # OpenAI's logit_bias: +100 makes a token all but certain, -100 all but impossible.
    def tokens(bias, temperature=0, seed=3):
        r = client.completions.create(model="demo", prompt=[1, 300, 301], max_tokens=8, temperature=temperature,
                                      logprobs=1, logit_bias=bias, seed=seed, extra_body={"ignore_eos": True})
        return r.choices[0].logprobs.tokens
    plain = tokens({})
    piece = {}
    for token_id in (300, 301):
        forced = tokens({str(token_id): 100})
        assert len(set(forced)) == 1 and forced != plain, (token_id, forced, plain)
        piece[token_id] = forced[0]
    assert piece[300] != piece[301]
    # Every other id of the vocabulary banned: greedy and sampled text keep to the two.
    vocab = json.loads((Path(server.model_dir) / "config.json").read_text())["vocab_size"]
    ban = {str(i): -100 for i in range(vocab) if i not in (300, 301)}
    for temperature, seed in ((0, 1), (1.0, 1), (1.0, 2)):
        kept = tokens(ban, temperature, seed)
        assert set(kept) <= {piece[300], piece[301]}, (temperature, kept)


def test_chat_logprobs(client):
    r = client.chat.completions.create(model="demo", messages=MESSAGES, max_tokens=8, temperature=0, logprobs=True,
                                       top_logprobs=3, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 8
    for entry in content:
        assert len(entry.top_logprobs) == 3
        values = [t.logprob for t in entry.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert entry.logprob <= 0
        # Greedy: the chosen token is the likeliest one.
        assert entry.logprob == pytest.approx(values[0], abs=1e-5)
        assert entry.bytes == list(entry.token.encode())
    assert "".join(e.token for e in content).strip() != ""


def test_completion_logprobs(client):
    r = client.completions.create(model="demo", prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=2,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert all(len(top) <= 2 for top in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset)


def test_errors_through_the_client(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=MESSAGES)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="demo", messages=MESSAGES, temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="demo", prompt="x " * 5000)
    assert e.value.body["code"] == "context_length_exceeded"


def test_64_concurrent_streams_all_complete_in_order(client):
    def one(i):
        chunks = list(client.completions.create(
            model="demo", prompt=f"Story {i}:", max_tokens=32, temperature=0.8, seed=i, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        return text, finish, chunks[-1].usage.completion_tokens

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(64)))
    for i, (text, finish, tokens) in enumerate(results):
        assert finish == ["length"], i
        assert tokens == 32, i
    # The same request alone gives the same text: batching changed nothing.
    again = one(5)
    assert again[0] == results[5][0]


def sample(client, n, seed, **kwargs):
    return client.chat.completions.create(model="demo", messages=MESSAGES, max_tokens=12, temperature=1.0, seed=seed,
                                          n=n, extra_body={"ignore_eos": True}, **kwargs)


def test_n_choices_are_the_requests_with_the_following_seeds(client):
    r = sample(client, 3, seed=40)
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.message.content for c in r.choices]
    # Choice j is what the same request with seed + j gives alone.
    alone = [sample(client, 1, seed=40 + j) for j in range(3)]
    assert texts == [a.choices[0].message.content for a in alone]
    assert len(set(texts)) > 1, "three samples at temperature 1 came out the same"
    # The prompt counts once, the completions of every choice add up.
    assert r.usage.prompt_tokens == alone[0].usage.prompt_tokens
    assert r.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone) == 36


def test_n_choices_streamed_equal_the_whole_answer(client):
    whole = sample(client, 2, seed=7)
    texts, finishes, roles = {}, {}, set()
    for chunk in sample(client, 2, seed=7, stream=True, stream_options={"include_usage": True}):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.delta.role:
                roles.add(c.index)
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
        if chunk.usage:
            assert chunk.usage.completion_tokens == whole.usage.completion_tokens
    assert texts == {c.index: c.message.content for c in whole.choices}
    assert finishes == {0: "length", 1: "length"} and roles == {0, 1}


def test_several_prompts_in_one_completion_request(client):
    prompts = ["Once upon a time", "The dog"]
    r = client.completions.create(model="demo", prompt=prompts, n=2, max_tokens=6, temperature=0.9, seed=3,
                                  extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    singles = [client.completions.create(model="demo", prompt=p, max_tokens=6, temperature=0.9, seed=3 + j,
                                         extra_body={"ignore_eos": True}) for p in prompts for j in range(2)]
    # Prompt-major order: prompt i's choice j is index 2 i + j.
    assert [c.text for c in r.choices] == [s.choices[0].text for s in singles]
    assert r.usage.prompt_tokens == singles[0].usage.prompt_tokens + singles[2].usage.prompt_tokens
    assert r.usage.completion_tokens == 24


def test_best_of_returns_each_prompts_likeliest_candidates(client):
    # best_of 4, n 2: of each prompt's 4 candidates (those n = 4 gives, same
    # seeds), the 2 with the highest summed token logprob, likeliest first.
    kw = dict(model="demo", prompt=["Once upon a time", "The dog"], max_tokens=8, temperature=1.0, seed=11,
              extra_body={"ignore_eos": True})
    every = client.completions.create(n=4, logprobs=0, **kw)
    best = client.completions.create(n=2, best_of=4, logprobs=0, **kw)
    plain = client.completions.create(n=2, best_of=4, **kw)
    assert [c.index for c in best.choices] == [0, 1, 2, 3]
    reordered = False
    for p in range(2):
        candidates = every.choices[4 * p:4 * p + 4]
        ranked = sorted(candidates, key=lambda c: -sum(c.logprobs.token_logprobs))
        assert [c.text for c in best.choices[2 * p:2 * p + 2]] == [c.text for c in ranked[:2]], p
        assert [c.text for c in plain.choices[2 * p:2 * p + 2]] == [c.text for c in ranked[:2]], p
        reordered |= [c.text for c in ranked[:2]] != [c.text for c in candidates[:2]]
    assert reordered, "the likeliest were the first candidates anyway: this seed cannot tell best_of from n"
    assert all(c.logprobs is None for c in plain.choices)
    # Every candidate's tokens are counted.
    assert best.usage.completion_tokens == every.usage.completion_tokens == 64


def test_best_of_refusals(client):
    with pytest.raises(openai.BadRequestError, match="at least 'n'"):
        client.completions.create(model="demo", prompt="Hi", n=3, best_of=2, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="cannot be streamed"):
        client.completions.create(model="demo", prompt="Hi", best_of=2, max_tokens=4, stream=True)
    with pytest.raises(openai.BadRequestError, match="best_of = 100"):
        client.completions.create(model="demo", prompt=["a", "b"], best_of=100, max_tokens=4)
