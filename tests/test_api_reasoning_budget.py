"""`reasoning_budget_tokens` end to end, against live servers (seed 001, llama.cpp semantics).

The tiny Qwen3-style checkpoint's template opens the thought itself
(`...<|im_start|>assistant\\n<think>\\n`), so the prompt already holds one
thinking token (`\\n`) after the opener: llama.cpp's prefill counts it, and a
budget of N leaves N - 1 for the model. To make every count exact the model
is never allowed to close the thought, call a tool or end its turn by itself
(`logit_bias` -100 on `</think>`, `<tool_call>` and the stop tokens): only the
budget machine can put `</think>` in the output, because forced tokens
bypass the bias.

Servers: `plain` has no `--reasoning-budget` (-1); `flagged` has
`--reasoning-budget 4` and a `--reasoning-budget-message`; `harmony` is a
channel-grammar checkpoint, where a budget is a 501.
"""

from __future__ import annotations

import json

import httpx
import pytest

from live_server import live_server

FLAG_BUDGET = 4
MESSAGE = " Time to answer."


@pytest.fixture(scope="module")
def plain(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        yield s


@pytest.fixture(scope="module")
def flagged(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3"), reasoning_budget=FLAG_BUDGET,
                     reasoning_budget_message=MESSAGE) as s:
        yield s


@pytest.fixture(scope="module")
def harmony(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3", template="harmony")) as s:
        yield s


def _ids(server):
    return {t: server.token_id(t) for t in ("<think>", "</think>", "<tool_call>", "<|im_end|>", "<|endoftext|>")}


def _never_close(server, extra: dict[int, float] | None = None) -> dict[str, float]:
    ids = _ids(server)
    bias = {str(ids[t]): -100.0 for t in ("</think>", "<tool_call>", "<|im_end|>", "<|endoftext|>")}
    bias.update({str(k): v for k, v in (extra or {}).items()})
    return bias


def _chat(server, max_tokens: int = 12, **fields) -> dict:
    body = {"messages": [{"role": "user", "content": "Think, then answer."}], "max_tokens": max_tokens,
            "temperature": 0, "return_token_ids": True, "logit_bias": _never_close(server), **fields}
    r = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _after_opener(prompt_ids: list[int], opener: int) -> list[int]:
    """The prompt's tokens after its last thinking opener."""
    at = len(prompt_ids) - 1 - prompt_ids[::-1].index(opener)
    return prompt_ids[at + 1:]


@pytest.mark.parametrize("budget", [1, 3, 6])
def test_a_budget_of_n_allows_exactly_n_thinking_tokens_counting_the_prompts_own(plain, budget):
    ids = _ids(plain)
    resp = _chat(plain, max_tokens=budget + 5, reasoning_budget_tokens=budget)
    prompt_tail = _after_opener(resp["prompt_token_ids"], ids["<think>"])
    assert prompt_tail == plain.tokenize("\n"), "the template should leave the thought open"
    out = resp["choices"][0]["token_ids"]
    assert out.count(ids["</think>"]) == 1
    assert len(prompt_tail) + out.index(ids["</think>"]) == budget
    # After the forced closer the model answers; the answer is content.
    assert resp["choices"][0]["message"]["content"]


def test_a_budget_of_zero_closes_the_thought_at_once(plain):
    ids = _ids(plain)
    resp = _chat(plain, max_tokens=4, reasoning_budget_tokens=0)
    out = resp["choices"][0]["token_ids"]
    assert out[0] == ids["</think>"]
    assert "reasoning_content" not in resp["choices"][0]["message"]
    assert resp["choices"][0]["message"]["content"]


def test_the_thinking_alias_sets_the_same_budget(plain):
    ids = _ids(plain)
    resp = _chat(plain, max_tokens=8, thinking_budget_tokens=3)
    out = resp["choices"][0]["token_ids"]
    assert 1 + out.index(ids["</think>"]) == 3


@pytest.mark.parametrize("budget_field", [{}, {"reasoning_budget_tokens": -1}])
def test_without_a_server_budget_absent_or_minus_one_leaves_the_thought_unbounded(plain, budget_field):
    ids = _ids(plain)
    resp = _chat(plain, max_tokens=12, **budget_field)
    assert ids["</think>"] not in resp["choices"][0]["token_ids"]
    assert resp["choices"][0]["finish_reason"] == "length"
    assert resp["choices"][0]["message"]["content"] in (None, "")


@pytest.mark.parametrize("budget_field", [{}, {"reasoning_budget_tokens": -1}, {"thinking_budget_tokens": -1}])
def test_absent_or_minus_one_follows_the_server_flag_then_forces_message_and_closer(flagged, budget_field):
    ids = _ids(flagged)
    message_ids = flagged.tokenize(MESSAGE)
    resp = _chat(flagged, max_tokens=FLAG_BUDGET + len(message_ids) + 4, **budget_field)
    out = resp["choices"][0]["token_ids"]
    free = FLAG_BUDGET - 1  # the prompt's own "\n" after <think> was the first
    assert out[free:free + len(message_ids)] == message_ids
    assert out[free + len(message_ids)] == ids["</think>"]
    assert resp["choices"][0]["message"]["reasoning_content"].endswith(MESSAGE.strip())


@pytest.mark.parametrize("budget", [0, 2, 7])
def test_a_request_budget_overrides_the_server_flag_higher_or_lower(flagged, budget):
    ids = _ids(flagged)
    message_ids = flagged.tokenize(MESSAGE)
    resp = _chat(flagged, max_tokens=budget + len(message_ids) + 3, reasoning_budget_tokens=budget)
    out = resp["choices"][0]["token_ids"]
    free = max(0, budget - 1)
    assert out[free:free + len(message_ids) + 1] == message_ids + [ids["</think>"]]
    assert out.count(ids["</think>"]) == 1


def test_a_streamed_budgeted_thought_ends_with_the_message_and_then_answers(flagged):
    body = {"messages": [{"role": "user", "content": "Think, then answer."}], "max_tokens": 12, "temperature": 0,
            "logit_bias": _never_close(flagged), "reasoning_budget_tokens": 3, "stream": True}
    whole = _chat(flagged, **{k: v for k, v in body.items() if k not in ("messages", "stream")})
    reasoning, content = "", ""
    with httpx.stream("POST", flagged.base_url + "/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                reasoning += delta.get("reasoning_content") or ""
                content += delta.get("content") or ""
    assert reasoning == whole["choices"][0]["message"]["reasoning_content"]
    assert reasoning.endswith(MESSAGE.strip())
    assert content == whole["choices"][0]["message"]["content"] and content


def test_a_completion_prompt_ending_at_the_opener_gets_n_free_tokens(plain):
    ids = _ids(plain)
    for prompt, free in (("Question: why?\n<think>", 4), ("Question: why?\n<think>\n", 3)):
        r = httpx.post(plain.base_url + "/v1/completions", json={
            "prompt": prompt, "max_tokens": 8, "temperature": 0, "reasoning_budget_tokens": 4,
            "logit_bias": _never_close(plain), "return_token_ids": True}, timeout=120)
        assert r.status_code == 200, r.text
        out = r.json()["choices"][0]["token_ids"]
        assert out.index(ids["</think>"]) == free, prompt


def test_a_thought_the_model_opens_itself_is_counted_from_its_opener_and_each_gets_a_fresh_budget(plain):
    ids = _ids(plain)
    budget = 2
    # The model is pushed to write <think> at every free step: it opens a
    # thought, spends the budget on more <think> tokens, is closed, reopens.
    bias = _never_close(plain, {ids["<think>"]: 100.0})
    r = httpx.post(plain.base_url + "/v1/completions", json={
        "prompt": "No thought open here.", "max_tokens": 2 * (budget + 2), "temperature": 0,
        "reasoning_budget_tokens": budget, "logit_bias": bias, "return_token_ids": True}, timeout=120)
    assert r.status_code == 200, r.text
    t, c = ids["<think>"], ids["</think>"]
    assert r.json()["choices"][0]["token_ids"] == [t, t, t, c] * 2


def test_a_forced_tool_call_waits_for_the_budgets_closer(plain):
    ids = _ids(plain)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    resp = _chat(plain, max_tokens=20, reasoning_budget_tokens=2, tools=[tool],
                 tool_choice={"type": "function", "function": {"name": "lookup"}})
    out = resp["choices"][0]["token_ids"]
    closer_at = out.index(ids["</think>"])
    assert closer_at == 1
    forced = plain.tokenize('\n\n<tool_call>\n{"name": "lookup", "arguments": ')
    assert out[closer_at + 1:closer_at + 1 + len(forced)] == forced


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("value", [-2, 2**31, "5", 5.0, 2.5, True, [3]])
def test_a_budget_outside_minus_one_to_int32_max_is_a_400_naming_the_field(plain, route, value):
    body = {"max_tokens": 2, "reasoning_budget_tokens": value}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if "chat" in route else {"prompt": "hi"})
    r = httpx.post(plain.base_url + route, json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == "reasoning_budget_tokens"
    assert "reasoning_budget_tokens" in err["message"]


@pytest.mark.parametrize("value", [-2, 2**31, "5", 5.0])
def test_a_bad_thinking_budget_is_a_400_naming_the_field_as_the_client_sent_it(plain, value):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "thinking_budget_tokens": value}
    r = httpx.post(plain.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == "thinking_budget_tokens" and err["message"].startswith("thinking_budget_tokens")
    assert "reasoning_budget_tokens" not in err["message"]


def test_the_largest_budget_is_accepted(plain):
    resp = _chat(plain, max_tokens=3, reasoning_budget_tokens=2**31 - 1)
    assert resp["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_a_budget_on_a_harmony_checkpoint_is_a_501_naming_the_format(harmony, route):
    body = {"max_tokens": 2, "reasoning_budget_tokens": 5}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if "chat" in route else {"prompt": "hi"})
    r = httpx.post(harmony.base_url + route, json=body, timeout=30)
    assert r.status_code == 501, r.text
    err = r.json()["error"]
    assert err["type"] == "not_supported_error"
    assert err["param"] == "reasoning_budget_tokens"
    assert "harmony" in err["message"]


@pytest.mark.parametrize("budget_field", [{}, {"reasoning_budget_tokens": -1}])
def test_a_harmony_checkpoint_serves_requests_without_a_budget(harmony, budget_field):
    for stream in (False, True):
        r = httpx.post(harmony.base_url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": stream, **budget_field},
            timeout=30)
        assert r.status_code == 200, r.text
        if stream:
            assert r.text.rstrip().endswith("data: [DONE]") and 'data: {"error"' not in r.text
        else:
            assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_on_a_harmony_checkpoint_messages_thinking_disabled_is_served_and_a_budget_is_a_400_not_a_retried_5xx(harmony):
    ask = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    ask["model"] = httpx.get(harmony.base_url + "/v1/models", timeout=30).json()["data"][0]["id"]
    r = httpx.post(harmony.base_url + "/v1/messages", json={**ask, "thinking": {"type": "disabled"}}, timeout=30)
    assert r.status_code == 200, r.text
    r = httpx.post(harmony.base_url + "/v1/messages", json={**ask, "thinking": {"type": "enabled", "budget_tokens": 16}},
                   timeout=30)
    # Anthropic's API has no 501, and its SDK retries every 5xx.
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and "thinking.budget_tokens" in err["message"]
    assert "-1" not in err["message"] and '"adaptive"' in err["message"], err["message"]


def test_a_server_budget_a_harmony_checkpoint_cannot_honour_is_refused_at_startup(tiny_checkpoint):
    # Else every request would be a 501, a -1 included: -1 falls back to the server's budget.
    from models.config import CheckpointError
    from server.runtime import build_runtime
    from server.settings import ServeSettings

    with pytest.raises(CheckpointError, match=r"--reasoning-budget 64 cannot be applied .* harmony"):
        build_runtime(ServeSettings(model=tiny_checkpoint("qwen3", template="harmony"), reasoning_budget=64))


def test_each_of_n_sampled_choices_gets_its_own_budget(plain):
    ids = _ids(plain)
    resp = _chat(plain, max_tokens=8, n=3, temperature=1.0, seed=11, reasoning_budget_tokens=4)
    assert len(resp["choices"]) == 3
    for choice in resp["choices"]:
        assert 1 + choice["token_ids"].index(ids["</think>"]) == 4


def test_a_forced_tool_call_is_made_even_when_the_model_tries_to_end_its_turn_inside_the_thought(plain):
    ids = _ids(plain)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    bias = {str(ids["</think>"]): -100.0, str(ids["<tool_call>"]): -100.0, str(ids["<|im_end|>"]): 100.0}
    resp = _chat(plain, max_tokens=30, tools=[tool], logit_bias=bias,
                 tool_choice={"type": "function", "function": {"name": "lookup"}})
    out = resp["choices"][0]["token_ids"]
    forced = plain.tokenize('\n\n<tool_call>\n{"name": "lookup", "arguments": ')
    assert out[0] == ids["</think>"], "the end of turn inside the thought became the closer"
    assert out[1:1 + len(forced)] == forced


def test_a_forced_call_after_an_end_of_turn_inside_a_budgeted_thought_closes_it_as_the_budget_would(flagged):
    # The same message + closer a spent budget forces: a client passing the reasoning back gets it
    # re-rendered the same way whichever rule closed the thought.
    ids = _ids(flagged)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    bias = {str(ids["</think>"]): -100.0, str(ids["<tool_call>"]): -100.0, str(ids["<|im_end|>"]): 100.0}
    resp = _chat(flagged, max_tokens=40, tools=[tool], logit_bias=bias, reasoning_budget_tokens=100,
                 tool_choice="required")
    out = resp["choices"][0]["token_ids"]
    closing = flagged.tokenize(MESSAGE) + [ids["</think>"]]
    assert out[:len(closing)] == closing
    assert out[len(closing):len(closing) + 3] == flagged.tokenize("\n\n<tool_call>")[:3]


def _streamed_usage(server, body: dict) -> dict:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    return chunks[-1]["usage"]


def test_usage_counts_each_choices_thought_up_to_its_closer_whole_and_streamed(plain):
    ids = _ids(plain)
    body = {"messages": [{"role": "user", "content": "Think, then answer."}], "max_tokens": 8, "n": 2,
            "temperature": 1.0, "seed": 5, "logit_bias": _never_close(plain), "reasoning_budget_tokens": 4}
    whole = _chat(plain, **{k: v for k, v in body.items() if k != "messages"})
    thought = sum(1 + c["token_ids"].index(ids["</think>"]) for c in whole["choices"])
    assert thought == 8 and whole["usage"]["completion_tokens"] == 16
    assert whole["usage"]["completion_tokens_details"]["reasoning_tokens"] == thought
    assert _streamed_usage(plain, body)["completion_tokens_details"]["reasoning_tokens"] == thought
    # A thought max_tokens cut is all reasoning.
    cut = {**body, "n": 1, "max_tokens": 3, "reasoning_budget_tokens": -1}
    assert _chat(plain, **{k: v for k, v in cut.items() if k != "messages"})["usage"]["completion_tokens_details"] \
        == {"reasoning_tokens": 3}
    assert _streamed_usage(plain, cut)["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_llama_cpps_reasoning_format_none_leaves_the_thought_in_the_content(plain):
    closer = plain.token_id("</think>")
    body = {"messages": [{"role": "user", "content": "Think, then answer."}], "max_tokens": 1, "temperature": 0,
            "logit_bias": {str(closer): 100}}  # one token: the closer of the thought the prompt opened
    split = httpx.post(plain.base_url + "/v1/chat/completions", json=body, timeout=60).json()["choices"][0]["message"]
    assert "</think>" not in (split["content"] or "")
    for fmt in ("auto", "deepseek"):  # what llama.cpp's web UI sends: the server's own split
        same = httpx.post(plain.base_url + "/v1/chat/completions", json={**body, "reasoning_format": fmt}, timeout=60)
        assert same.status_code == 200 and same.json()["choices"][0]["message"] == split
    raw = httpx.post(plain.base_url + "/v1/chat/completions", json={**body, "reasoning_format": "none"},
                     timeout=60).json()["choices"][0]["message"]
    assert raw["content"] == "</think>" and not raw.get("reasoning_content"), raw
