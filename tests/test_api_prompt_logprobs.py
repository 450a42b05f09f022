"""Prompt logprobs over HTTP: `/v1/completions` with `echo` and `logprobs`, and vLLM's `prompt_logprobs`.

What it checks: the logprobs that lead an echoed choice score each prompt token
by the tokens before it, as transformers computes them on the same weights
(logit parity), across chunked prefill, windowed layers and a prompt whose
prefix the cache already holds; the first prompt token is null, the shape is
OpenAI's legacy one, whole and streamed alike, on every choice of a batch; and
the way lm-evaluation-harness reads a likelihood (`token_logprobs[ctxlen:-1]`,
greedy when each token is its position's best) gives transformers' answer;
vLLM's `prompt_logprobs` carry each token's logprob and rank on completions
and on chat's rendered prompt, and are refused in a stream, as vLLM does.
"""

from __future__ import annotations

import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import torch
from transformers import AutoModelForCausalLM

from engine_samplers import swapped
from live_server import live_server

WINDOW = 8
PROMPT = ("The harbour master kept a ledger of every ship that anchored in the bay, the tides they "
          "came in on, and the cargo they carried out again before the autumn storms.")


@pytest.fixture(scope="module")
def folder(tiny_checkpoint):
    return tiny_checkpoint("qwen3", sliding_window=WINDOW, layers=3)


@pytest.fixture(scope="module")
def server(folder):
    # Chunks of 16 tokens: a prompt of ~40 is scored over three steps, past the window each time.
    with live_server(folder, max_batched_tokens=16) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval()

    def logprobs(ids: list[int]) -> torch.Tensor:
        """[len(ids) - 1, vocab]: row i is the distribution over token i + 1."""
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
        return torch.log_softmax(logits, dim=-1)

    return logprobs


def _model(client) -> str:
    return client.models.list().data[0].id


def _assert_scores_the_prompt(lp, ids: list[int], ref: torch.Tensor, k: int) -> None:
    n = len(ids)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, "nothing comes before the first token"
    expected = ref.gather(1, torch.tensor(ids[1:]).view(-1, 1)).view(-1)
    got = torch.tensor(lp.token_logprobs[1:n])
    assert torch.allclose(got, expected, atol=2e-4), (got - expected).abs().max()
    best = ref.max(dim=-1).values
    for i in range(1, n):
        top = lp.top_logprobs[i]
        assert k <= len(top) <= k + 1, "k alternatives, plus the prompt token itself when it is not among them"
        assert math.isclose(max(top.values()), float(best[i - 1]), abs_tol=2e-4), i
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)


def test_echo_with_logprobs_scores_each_prompt_token_as_transformers_does(client, server, reference):
    ids = server.tokenize(PROMPT)
    assert len(ids) > 2 * 16 and len(ids) > 2 * WINDOW, "the prompt must span several chunks and windows"
    r = client.completions.create(model=_model(client), prompt=PROMPT, echo=True, logprobs=2, max_tokens=3,
                                  temperature=0)
    choice = r.choices[0]
    lp = choice.logprobs
    assert len(lp.tokens) == len(ids) + 3 and choice.text.startswith(PROMPT)
    _assert_scores_the_prompt(lp, ids, reference(ids), 2)
    # The generated tokens follow, each with its own logprob, as without echo.
    plain = client.completions.create(model=_model(client), prompt=PROMPT, logprobs=2, max_tokens=3, temperature=0)
    assert lp.tokens[len(ids):] == plain.choices[0].logprobs.tokens
    assert lp.token_logprobs[len(ids):] == pytest.approx(plain.choices[0].logprobs.token_logprobs, abs=1e-4)
    assert lp.text_offset[len(ids)] == len(PROMPT), "the generated text starts where the echoed prompt ends"


def test_a_prompt_the_cache_holds_is_recomputed_to_be_scored(client, server, reference):
    prompt = PROMPT.replace("harbour", "lighthouse")
    ids = server.tokenize(prompt)
    model = _model(client)
    client.completions.create(model=model, prompt=prompt, max_tokens=1)  # now cached
    cached = client.completions.create(model=model, prompt=prompt, max_tokens=1)
    assert cached.usage.prompt_tokens_details.cached_tokens > 0
    scored = client.completions.create(model=model, prompt=prompt, echo=True, logprobs=1, max_tokens=1)
    assert scored.usage.prompt_tokens_details.cached_tokens == 0, "a cached position would have no logits"
    _assert_scores_the_prompt(scored.choices[0].logprobs, ids, reference(ids), 1)


def test_every_choice_of_a_batch_carries_its_prompts_scores_whole_and_streamed(client, server):
    prompts = [PROMPT, "Ships leave at dawn."]
    args = dict(model=_model(client), prompt=prompts, n=2, echo=True, logprobs=1, max_tokens=3, temperature=0)
    whole = client.completions.create(**args)
    for c in whole.choices:
        ids = server.tokenize(prompts[c.index // 2])
        assert c.logprobs.tokens[:len(ids)] == whole.choices[c.index // 2 * 2].logprobs.tokens[:len(ids)]
        assert c.logprobs.token_logprobs[:len(ids)] == whole.choices[c.index // 2 * 2].logprobs.token_logprobs[:len(ids)]
        assert len(c.logprobs.tokens) == len(ids) + 3
    streamed: dict[int, dict] = {}
    for chunk in client.completions.create(stream=True, **args):
        for c in chunk.choices:
            into = streamed.setdefault(c.index, {"text": "", "tokens": [], "token_logprobs": [], "text_offset": []})
            into["text"] += c.text
            for key in ("tokens", "token_logprobs", "text_offset"):
                into[key] += getattr(c.logprobs, key)
    for c in whole.choices:
        got = streamed[c.index]
        assert got["text"] == c.text and got["tokens"] == c.logprobs.tokens and got["text_offset"] == c.logprobs.text_offset
        assert got["token_logprobs"][0] is None
        assert got["token_logprobs"][1:] == pytest.approx(c.logprobs.token_logprobs[1:], abs=1e-4)


def test_lm_evaluation_harness_reads_a_continuations_likelihood_as_transformers_gives_it(client, server, reference):
    """lm-eval's local-completions model: token-id prompt, echo, logprobs 1, max_tokens 1; the
    continuation's logprob is sum(token_logprobs[ctxlen:-1]), greedy if each is its top_logprobs' best."""
    context, continuation = server.tokenize("Ships leave the harbour"), server.tokenize(" at dawn.")
    ids = context + continuation
    r = client.completions.create(model=_model(client), prompt=ids, echo=True, logprobs=1, max_tokens=1,
                                  temperature=0)
    lp = r.choices[0].logprobs
    ctxlen = len(context)
    got = sum(lp.token_logprobs[ctxlen:-1])
    ref = reference(ids)
    positions = torch.arange(ctxlen - 1, len(ids) - 1)
    expected = ref[positions].gather(1, torch.tensor(continuation).view(-1, 1)).sum()
    assert math.isclose(got, float(expected), abs_tol=1e-3)
    greedy = all(tok == max(top.values()) for tok, top in zip(lp.token_logprobs[ctxlen:-1], lp.top_logprobs[ctxlen:-1]))
    assert greedy == bool((ref[positions].argmax(-1) == torch.tensor(continuation)).all())


def test_max_tokens_0_with_echo_scores_the_prompt_and_generates_nothing_whole_and_streamed(client, server, reference):
    ids = server.tokenize(PROMPT)
    args = dict(model=_model(client), prompt=PROMPT, echo=True, logprobs=1, max_tokens=0)
    r = client.completions.create(**args)
    choice = r.choices[0]
    assert choice.text == PROMPT and choice.finish_reason == "length"
    assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == len(ids)
    assert len(choice.logprobs.tokens) == len(ids)
    _assert_scores_the_prompt(choice.logprobs, ids, reference(ids), 1)
    chunks = list(client.completions.create(stream=True, **args))
    assert "".join(c.text for chunk in chunks for c in chunk.choices) == PROMPT
    streamed = [lp for chunk in chunks for c in chunk.choices if c.logprobs for lp in c.logprobs.token_logprobs]
    assert streamed[0] is None and streamed[1:] == pytest.approx(choice.logprobs.token_logprobs[1:], abs=1e-4)



def test_vllms_prompt_logprobs_give_each_prompt_tokens_logprob_and_rank_on_completions(server, reference):
    ids = server.tokenize(PROMPT)
    body = {"prompt": PROMPT, "max_tokens": 1, "prompt_logprobs": 3, "temperature": 0}
    r = httpx.post(server.v1 + "/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    scored = r.json()["choices"][0]["prompt_logprobs"]
    ref = reference(ids)
    assert len(scored) == len(ids) and scored[0] is None
    for i, at in enumerate(scored[1:]):
        own = at[str(ids[i + 1])]
        assert math.isclose(own["logprob"], float(ref[i, ids[i + 1]]), abs_tol=2e-4)
        assert own["rank"] == 1 + int((ref[i] > ref[i, ids[i + 1]]).sum()), "1 + the tokens likelier there"
        best = [e for e in at.values() if e["rank"] == 1]
        assert len(at) in (3, 4) and best and math.isclose(best[0]["logprob"], float(ref[i].max()), abs_tol=2e-4)


def test_vllms_prompt_logprobs_score_a_chats_rendered_prompt_and_are_refused_in_a_stream(server, reference):
    messages = [{"role": "user", "content": "Which ships anchored in the bay?"}]
    body = {"messages": messages, "max_tokens": 1, "prompt_logprobs": 0, "return_token_ids": True}
    r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    ids, scored = r.json()["prompt_token_ids"], r.json()["prompt_logprobs"]
    ref = reference(ids)
    assert len(scored) == len(ids) and scored[0] is None
    got = [at[str(t)]["logprob"] for at, t in zip(scored[1:], ids[1:])]
    assert all(len(at) == 1 for at in scored[1:]), "0 alternatives: the prompt token alone"
    assert got == pytest.approx(ref.gather(1, torch.tensor(ids[1:]).view(-1, 1)).view(-1).tolist(), abs=2e-4)
    r = httpx.post(server.v1 + "/chat/completions", json={**body, "stream": True}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_logprobs"


class _FailingScorer:
    """Samples for real, slowly; scoring a prompt fails on purpose."""

    def __init__(self, real) -> None:
        self.real, self.new_state = real, real.new_state

    def sample(self, logits, states, histories):
        time.sleep(0.05)
        return self.real.sample(logits, states, histories)

    def score(self, logits, following, top):
        raise RuntimeError("a scoring that fails on purpose")


def test_a_request_whose_prompt_scoring_fails_ends_alone_with_one_error(server):
    url = server.v1 + "/completions"
    no_eos = {str(server.token_id(t)): -100 for t in ("<|im_end|>", "<|endoftext|>")}
    engine = server.state.engine
    with swapped(engine, _FailingScorer), ThreadPoolExecutor(2) as pool:
        good = pool.submit(httpx.post, url, json={"prompt": "Ships", "max_tokens": 20, "temperature": 0,
                                                  "logit_bias": no_eos}, timeout=120)
        time.sleep(0.3)  # the good one is decoding when the bad one arrives
        errors = engine.counters.step_errors
        # A prompt of one chunk: the step that fails to score it also samples it.
        bad = httpx.post(url, json={"prompt": "Ships sail", "echo": True, "logprobs": 1, "max_tokens": 2},
                         timeout=120)
        assert bad.status_code == 500 and "scoring" in bad.json()["error"]["message"]
        time.sleep(0.2)  # the engine thread finishes the step the failure happened in
        assert engine.counters.step_errors == errors + 1, "one failure, reported once"
        good = good.result()
    assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] == 20


def test_echoed_offsets_only_grow_when_the_tokenizer_adds_a_bos_the_text_does_not_show(tiny_checkpoint):
    with live_server(tiny_checkpoint("llama3")) as llama:
        ids = llama.tokenize("Ships leave at dawn.", headers=None)
        body = {"prompt": "Ships leave at dawn.", "echo": True, "logprobs": 1, "max_tokens": 3, "temperature": 0}
        whole = httpx.post(llama.v1 + "/completions", json=body, timeout=60).json()["choices"][0]["logprobs"]
        events = httpx.post(llama.v1 + "/completions", json={**body, "stream": True}, timeout=60).text
    prompt = len(llama.state.tokenizer.encode("Ships leave at dawn.", add_special_tokens=True))
    assert prompt == len(ids) + 1, "the prompt starts with a BOS its text does not show"
    offsets = whole["text_offset"]
    assert offsets == sorted(offsets) and len(offsets) == prompt + 3
    pieces = [llama.state.tokenizer.decode([t], skip_special_tokens=False)
              for t in llama.state.tokenizer.encode("Ships leave at dawn.", add_special_tokens=True)]
    assert offsets[prompt] == sum(len(p) for p in pieces), "the generated tokens count on from the prompt's pieces"
    streamed = [o for line in events.splitlines() if line.startswith("data: {")
                for c in json.loads(line[6:])["choices"] if c.get("logprobs") for o in c["logprobs"]["text_offset"]]
    assert streamed == offsets


def test_an_empty_prompt_continues_from_the_bos_its_tokenizer_adds(tiny_checkpoint):
    with live_server(tiny_checkpoint("llama3")) as llama:
        body = {"prompt": ["", "Hi"], "max_tokens": 2, "temperature": 0, "echo": True, "logprobs": 0}
        r = httpx.post(llama.v1 + "/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    first = r.json()["choices"][0]
    assert first["logprobs"]["tokens"][0] == "<|begin_of_text|>" and first["logprobs"]["token_logprobs"][0] is None
    assert r.json()["usage"]["prompt_tokens"] == 1 + len(llama.state.tokenizer.encode("Hi", add_special_tokens=True))


def test_a_whole_scored_response_is_shaped_on_a_tokenizer_thread_not_the_event_loop(server, monkeypatch):
    state = server.state
    threads: set[str] = set()
    original = state.token_bytes

    def recording(token_id: int) -> bytes:
        threads.add(threading.current_thread().name)
        return original(token_id)

    monkeypatch.setattr(state, "token_bytes", recording)
    r = httpx.post(server.v1 + "/completions", json={"prompt": PROMPT, "echo": True, "logprobs": 2, "max_tokens": 2,
                                                     "n": 2}, timeout=60)
    assert r.status_code == 200
    assert threads and all(name.startswith("tokenizer") for name in threads), threads
