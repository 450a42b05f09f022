"""The OpenAI-compatible API through the official `openai` SDK, against a live server.

One server per module, on a tiny random Qwen3-style checkpoint. The model's
text is gibberish, so the tests assert what the server promises whatever the
weights: shapes the SDK parses, greedy determinism (a streamed answer equals
the whole one; n=2 greedy choices agree), counts (`max_tokens`, usage), the
prefix cache on a repeated prompt, and -- steered by `logit_bias`,
`repetition_penalty` and a named `tool_choice` -- a tool call the server
parses, answered with a tool result.

`enable_thinking: false` keeps the answer in `content`; the template's
default opens a `<think>` block, tested where reasoning is the point.
"""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from engine_samplers import PoisonedSampler, SlowSampler, swapped
from live_server import live_server

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    # Without the tool-call grammar: `_forced_weather_call` steers the random model into `{}`
    # arguments, which get_weather's schema (city required) would not let through.
    # tests/test_api_tool_call_grammar.py serves with it.
    with live_server(tiny_checkpoint("qwen3"), tool_call_grammar=False) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def no_eos(server):
    """logit_bias that keeps the model from ending its turn, so max_tokens decides the length."""
    return {str(server.token_id(t)): -100 for t in ("<|im_end|>", "<|endoftext|>")}


def _unique(words: int = 40) -> str:
    """A user message no other test sent, so its prompt misses the prefix cache."""
    return "Tell me about " + " ".join(uuid.uuid4().hex[:6] for _ in range(words))


def test_the_model_list_names_the_one_served_checkpoint(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == [server.state.info.served_model_name]
    assert models[0].object == "model"


def test_the_sdk_retrieves_the_served_model_and_an_unknown_one_is_a_404_naming_it(client, server):
    name = server.state.info.served_model_name
    assert client.models.retrieve(name).id == name
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("no-such/model")
    assert "no-such/model" in err.value.body["message"] and err.value.body["param"] == "model"
    assert err.value.body["code"] == "model_not_found"
    assert httpx.head(server.base_url + "/health", timeout=30).status_code == 200


def test_while_the_checkpoint_loads_the_model_list_already_names_it_and_health_says_503(tiny_checkpoint):
    from fastapi.testclient import TestClient

    from server.app import create_app
    from server.settings import ServeSettings

    folder = tiny_checkpoint("qwen3")
    loading = TestClient(create_app(ServeSettings(model=folder), background_load=False))  # lifespan not run: loading
    listed = loading.get("/v1/models")
    assert listed.status_code == 200 and listed.json()["data"][0]["id"] == folder.name, listed.text
    assert listed.json()["data"][0]["meta"] is None
    assert loading.get("/health").status_code == 503


def test_a_request_the_engine_fails_to_take_in_frees_its_slot(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3"), parallel=1) as s:
        engine, failing = s.state.engine, {"left": 1}
        real = engine.processor_factory

        def factory(seq):
            if failing["left"]:
                failing["left"] -= 1
                raise RuntimeError("injected failure building a processor")
            return real(seq)

        engine.processor_factory = factory
        body = {"prompt": "hi", "max_tokens": 2, "temperature": 0}
        assert httpx.post(s.v1 + "/completions", json=body, timeout=60).status_code == 500
        assert not httpx.get(s.base_url + "/slots", timeout=30).json()[0]["is_processing"]
        assert httpx.post(s.v1 + "/completions", json={**body, "id_slot": 0}, timeout=60).status_code == 200


def test_props_carry_the_fields_llama_cpp_clients_read(server):
    props = httpx.get(server.base_url + "/props", timeout=30).json()
    assert props["modalities"] == {"vision": False, "audio": False}
    assert props["eos_token"] == server.state.tokenizer.eos_token
    assert props["endpoint_slots"] and props["endpoint_props"] and props["endpoint_metrics"]


STREAMED_ROUTES = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/completions", {"prompt": "hi"}),
]


def _events(text: str) -> list[str]:
    return [line.removeprefix("data: ") for line in text.split("\n\n") if line.startswith("data: ")]


@pytest.mark.parametrize("route, body", STREAMED_ROUTES)
def test_every_chunk_of_a_stream_carries_one_id_and_one_created_time(server, model, no_eos, route, body):
    with swapped(server.state.engine, lambda real: SlowSampler(real, delay=0.25)):
        r = httpx.post(server.base_url + route, timeout=120, json={
            **body, "model": model, "max_tokens": 8, "stream": True, "logit_bias": no_eos})
    chunks = [json.loads(e) for e in _events(r.text)[:-1]]
    assert len(chunks) >= 3  # spread over the eight steps' two seconds
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1


def test_a_request_whose_sampling_fails_ends_alone_and_the_others_in_its_batch_finish(server, model, no_eos):
    url = server.base_url + "/v1/chat/completions"
    ask = {"model": model, "messages": [{"role": "user", "content": "Tell me a story"}], "logit_bias": no_eos}
    tokens_before = server.state.engine.counters.generation_tokens
    with (swapped(server.state.engine, lambda real: PoisonedSampler(real, poison=0.123, delay=0.05)) as picky,
          ThreadPoolExecutor(2) as pool):
        good = pool.submit(httpx.post, url, json={**ask, "max_tokens": 60, "temperature": 0}, timeout=120)
        # The good one is decoding (60 steps of 50 ms or more) when the bad one arrives: waited for, not slept.
        deadline = time.monotonic() + 30
        while server.state.engine.counters.generation_tokens == tokens_before:
            assert time.monotonic() < deadline and not good.done(), "the good request never started decoding"
            time.sleep(0.01)
        bad = pool.submit(httpx.post, url, json={**ask, "max_tokens": 4, "temperature": 0.123}, timeout=120)
        good, bad = good.result(), bad.result()
    assert bad.status_code == 500 and "sampling this request" in bad.json()["error"]["message"]
    assert good.status_code == 200, good.text
    assert good.json()["usage"]["completion_tokens"] == 60
    assert picky.failed and picky.sampled_after_failure > 0  # the good one was decoding when the bad one failed


@pytest.mark.parametrize("route, body", STREAMED_ROUTES)
def test_continuous_usage_stats_put_the_counts_so_far_on_every_chunk(server, model, no_eos, route, body):
    def stream(continuous: bool, n: int = 1) -> list[dict]:
        r = httpx.post(server.base_url + route, timeout=120, json={
            **body, "model": model, "max_tokens": 6, "stream": True, "logit_bias": no_eos, "temperature": 0, "n": n,
            "stream_options": {"include_usage": True, "continuous_usage_stats": continuous}})
        return [json.loads(e) for e in _events(r.text)[:-1]]

    plain, continuous = stream(False), stream(True)
    assert all("usage" not in c for c in plain[:-1]) and plain[-1]["usage"]["completion_tokens"] == 6
    counts = [c["usage"]["completion_tokens"] for c in continuous]
    assert counts == sorted(counts) and counts[-1] == 6 and counts[0] < 6
    assert {c["usage"]["prompt_tokens"] for c in continuous} == {plain[-1]["usage"]["prompt_tokens"]}
    # With two choices each chunk counts its own choice's tokens; the final usage chunk counts both.
    two = stream(True, n=2)
    per_choice = {i: [c["usage"]["completion_tokens"] for c in two[:-1] if c["choices"][0]["index"] == i]
                  for i in (0, 1)}
    assert all(counts == sorted(counts) and counts[-1] == 6 for counts in per_choice.values())
    assert two[-1]["choices"] == [] and two[-1]["usage"]["completion_tokens"] == 12


@pytest.mark.parametrize("route, body", STREAMED_ROUTES)
def test_a_stream_that_fails_midway_reports_the_error_in_band_then_ends_with_done(server, model, no_eos, route, body):
    with swapped(server.state.engine, lambda real: PoisonedSampler(real, poison=0.321, allowed=3)):
        r = httpx.post(server.base_url + route, timeout=120, json={
            **body, "model": model, "max_tokens": 12, "stream": True, "logit_bias": no_eos, "temperature": 0.321})
    assert r.status_code == 200  # the headers went out with the first chunk
    events = _events(r.text)
    assert len(events) >= 3 and events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["type"] == "server_error"


def test_a_chat_completion_stops_at_max_tokens_and_counts_them(client, model, no_eos):
    resp = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello there"}], max_tokens=6, temperature=0,
        logit_bias=no_eos, extra_body=NO_THINKING,
    )
    assert resp.object == "chat.completion"
    assert resp.model == model
    choice = resp.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.message.tool_calls is None
    assert resp.usage.completion_tokens == 6
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 6
    assert resp.timings["predicted_n"] == 6  # llama.cpp's timings ride along as an extra field


def test_a_streamed_chat_says_the_same_as_the_whole_response(client, model, no_eos):
    args = dict(model=model, messages=[{"role": "user", "content": "Stream me a reply"}], max_tokens=7,
                temperature=0, logit_bias=no_eos, extra_body=NO_THINKING)
    whole = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))

    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.model == model for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage.completion_tokens == 7
    assert usage_chunk.usage.prompt_tokens == whole.usage.prompt_tokens


def test_a_streamed_thought_arrives_as_reasoning_content_equal_to_the_whole_one(client, model, server, no_eos):
    # The template opens <think>; forbidding the closer keeps every token a thought.
    bias = {**no_eos, str(server.token_id("</think>")): -100, str(server.token_id("<tool_call>")): -100}
    args = dict(model=model, messages=[{"role": "user", "content": "Think about it"}], max_tokens=6,
                temperature=0, logit_bias=bias)
    whole = client.chat.completions.create(**args)
    assert whole.choices[0].message.content is None  # as the stream, which never sends content, reassembles it
    assert whole.choices[0].message.reasoning_content

    chunks = list(client.chat.completions.create(**args, stream=True))
    streamed = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.reasoning_content
    assert not any(c.choices[0].delta.content for c in chunks if c.choices)


def test_a_completion_continues_text_and_token_id_prompts_alike(client, model, server, no_eos):
    prompt = "Once upon a time"
    by_text = client.completions.create(model=model, prompt=prompt, max_tokens=5, temperature=0, logit_bias=no_eos)
    assert by_text.object == "text_completion"
    assert by_text.choices[0].finish_reason == "length"
    assert by_text.usage.completion_tokens == 5
    ids = server.tokenize(prompt)
    assert by_text.usage.prompt_tokens == len(ids)

    by_ids = client.completions.create(model=model, prompt=ids, max_tokens=5, temperature=0, logit_bias=no_eos)
    assert by_ids.choices[0].text == by_text.choices[0].text

    streamed = list(client.completions.create(model=model, prompt=prompt, max_tokens=5, temperature=0,
                                              logit_bias=no_eos, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == by_text.choices[0].text
    assert [c.choices[0].finish_reason for c in streamed if c.choices][-1] == "length"


def test_a_batch_of_prompts_answers_each_prompt_n_times_in_openais_order(client, model, server, no_eos):
    prompts = ["Once upon a time", "The weather in Paris"]
    args = dict(model=model, max_tokens=4, temperature=0, logit_bias=no_eos)
    alone = [client.completions.create(prompt=p, **args).choices[0].text for p in prompts]
    batch = client.completions.create(prompt=prompts, n=2, **args)
    # Choice p * n + i is prompt p's i-th; greedy, each is what the prompt alone gets.
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert [c.text for c in batch.choices] == [alone[0], alone[0], alone[1], alone[1]]
    assert batch.usage.prompt_tokens == sum(len(server.tokenize(p)) for p in prompts)
    assert batch.usage.completion_tokens == 4 * 4

    chunks = list(client.completions.create(prompt=[server.tokenize(p) for p in prompts], n=2, stream=True,
                                            stream_options={"include_usage": True}, **args))
    texts = {}
    for chunk in chunks:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    assert texts == {c.index: c.text for c in batch.choices}
    assert chunks[-1].usage.prompt_tokens == batch.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == batch.usage.completion_tokens



def test_echo_puts_each_prompts_text_before_its_choices_whole_and_streamed(client, model, server, no_eos):
    prompts = ["Once upon a time", "The weather in Paris"]
    args = dict(model=model, max_tokens=4, temperature=0, logit_bias=no_eos)
    plain = client.completions.create(prompt=prompts, n=2, **args)
    echoed = client.completions.create(prompt=prompts, n=2, echo=True, **args)
    assert [c.text for c in echoed.choices] == [prompts[c.index // 2] + c.text for c in plain.choices]
    assert echoed.usage == plain.usage

    by_ids = client.completions.create(prompt=server.tokenize(prompts[0]), echo=True, **args)
    assert by_ids.choices[0].text == echoed.choices[0].text, "an id prompt echoes as its decoded text"

    texts: dict[int, str] = {}
    for chunk in client.completions.create(prompt=prompts, n=2, echo=True, stream=True, **args):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    assert texts == {c.index: c.text for c in echoed.choices}

def test_a_batch_with_a_prompt_past_the_context_is_refused_naming_that_prompt(server):
    too_long = list(range(3, 3 + server.state.info.max_model_len + 1))
    r = httpx.post(server.base_url + "/v1/completions", timeout=60,
                   json={"prompt": [[5, 6], too_long], "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "prompt.1"


def _forced_weather_call(server, client, model, messages):
    """Steer the random model through one `get_weather` call with `{}` arguments.

    The named tool_choice forces `<tool_call>\\n{"name": "get_weather",
    "arguments": `; the model must then write `{`, `}}\\n` and stop. All
    other tokens get -100. Among the three allowed tokens the bias order
    (100 > 70 > 40) picks `{` first; repetition_penalty=10 then divides a
    used token's (positive) logit by ten, so `}}\\n` wins the next step and
    the stop token the one after. The three must be absent from the prompt
    and the forced prefix, or the penalty would hit them from the start.
    """
    base = dict(model=model, messages=messages, tools=[WEATHER_TOOL], temperature=0,
                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    probe = client.chat.completions.create(**base, max_tokens=1, extra_body={**NO_THINKING, "return_token_ids": True})
    forced = server.tokenize('<tool_call>\n{"name": "get_weather", "arguments": ')
    seen = set(probe.prompt_token_ids) | set(forced)
    open_brace, close_braces = server.tokenize("{}}\n")
    stop = next(t for t in range(len(server.state.tokenizer) - 1, -1, -1)
                if t not in seen and t not in (open_brace, close_braces)
                and server.state.tokenizer.convert_ids_to_tokens(t).isalpha())
    assert not {open_brace, close_braces} & seen, "the steering tokens must not appear in the prompt"
    bias = {str(t): -100 for t in range(len(server.state.tokenizer))}
    bias.update({str(open_brace): 100, str(close_braces): 70, str(stop): 40})
    return base, dict(logit_bias=bias, max_tokens=len(forced) + 8,
                      extra_body={**NO_THINKING, "repetition_penalty": 10.0, "stop_token_ids": [stop]})


def test_a_tool_call_round_trip_parses_the_call_and_answers_the_tool_result(server, client, model, no_eos):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    base, steer = _forced_weather_call(server, client, model, messages)
    first = client.chat.completions.create(**base, **steer)
    choice = first.choices[0]
    assert choice.finish_reason == "stop", "a call the client named is no choice of the model's (OpenAI: stop)"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert call.function.arguments == "{}"

    # The SDK's own message object goes back as the assistant turn, with the result.
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 18}'}]
    tool_call_token = server.token_id("<tool_call>")
    second = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER_TOOL], max_tokens=5, temperature=0,
        logit_bias={**no_eos, str(tool_call_token): -100}, extra_body={**NO_THINKING, "return_token_ids": True},
    )
    answer = second.choices[0]
    assert answer.finish_reason == "length"
    assert answer.message.tool_calls is None and answer.message.content
    # The tool result is in the prompt the server rendered.
    prompt_text = server.state.tokenizer.decode(second.prompt_token_ids)
    assert '<tool_response>\n{"temperature_c": 18}\n</tool_response>' in prompt_text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>' in prompt_text
    # The second turn extends the first: its prefix comes from the cache.
    assert second.usage.prompt_tokens_details.cached_tokens > 0


def test_a_streamed_tool_call_announces_the_call_then_its_arguments(server, client, model):
    base, steer = _forced_weather_call(server, client, model, [{"role": "user", "content": "Weather in Oslo?"}])
    chunks = list(client.chat.completions.create(**base, **steer, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas, "no tool-call deltas were streamed"
    assert deltas[0].index == 0 and deltas[0].id.startswith("call_") and deltas[0].type == "function"
    assert deltas[0].function.name == "get_weather"
    assert all(d.index == 0 and d.id is None for d in deltas[1:])
    assert "".join(d.function.arguments or "" for d in deltas) == "{}"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert not any(c.choices[0].delta.content for c in chunks if c.choices)


def test_a_call_cut_by_a_stop_string_comes_back_as_the_same_partial_call_whole_and_streamed(server, client, model):
    base, steer = _forced_weather_call(server, client, model, [{"role": "user", "content": "Weather in Oslo?"}])
    whole = client.chat.completions.create(**base, **steer, stop=["}}"]).choices[0]
    chunks = list(client.chat.completions.create(**base, **steer, stop=["}}"], stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    streamed = (deltas[0].function.name, "".join(d.function.arguments or "" for d in deltas))
    [call] = whole.message.tool_calls
    assert (call.function.name, call.function.arguments) == streamed == ("get_weather", "{")
    assert whole.message.content is None, "no call markup leaks into the content"
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasons == [whole.finish_reason]


def test_a_call_cut_by_max_tokens_comes_back_as_the_same_partial_call_whole_and_streamed(server, client, model):
    base, steer = _forced_weather_call(server, client, model, [{"role": "user", "content": "Weather in Lima?"}])
    forced = server.tokenize('<tool_call>\n{"name": "get_weather", "arguments": ')
    steer = {**steer, "max_tokens": len(forced) + 1}  # the forced opening, then the model's `{`, then the cut
    whole = client.chat.completions.create(**base, **steer).choices[0]
    assert whole.finish_reason == "length" and whole.message.content is None
    assert [(c.function.name, c.function.arguments) for c in whole.message.tool_calls] == [("get_weather", "{")]
    chunks = list(client.chat.completions.create(**base, **steer, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "get_weather" and "".join(d.function.arguments or "" for d in deltas) == "{"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_two_greedy_choices_agree_and_usage_counts_both(client, model, no_eos):
    resp = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Two answers please"}], n=2, max_tokens=4,
        temperature=0, logit_bias=no_eos, extra_body=NO_THINKING,
    )
    assert sorted(c.index for c in resp.choices) == [0, 1]
    assert resp.choices[0].message.content == resp.choices[1].message.content
    assert all(c.finish_reason == "length" for c in resp.choices)
    assert resp.usage.completion_tokens == 8


def test_two_sampled_choices_are_reproducible_with_a_seed_and_stream_per_index(client, model, no_eos):
    args = dict(model=model, messages=[{"role": "user", "content": "Surprise me"}], n=2, max_tokens=5,
                temperature=1.0, seed=1234, logit_bias=no_eos, extra_body=NO_THINKING)
    a = client.chat.completions.create(**args)
    b = client.chat.completions.create(**args)
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]

    chunks = list(client.chat.completions.create(**args, stream=True))
    streamed = {0: "", 1: ""}
    for c in chunks:
        for ch in c.choices:
            streamed[ch.index] += ch.delta.content or ""
    assert streamed == {c.index: c.message.content for c in a.choices}


def test_chat_logprobs_report_the_greedy_token_as_its_own_best_alternative(client, model, no_eos):
    resp = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Log my probabilities"}], max_tokens=5,
        temperature=0, logprobs=True, top_logprobs=3, extra_body=NO_THINKING,
    )
    entries = resp.choices[0].logprobs.content
    assert len(entries) == resp.usage.completion_tokens
    for e in entries:
        assert len(e.top_logprobs) == 3
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True) and all(lp <= 0 for lp in tops)
        # Greedy and unbiased: the chosen token is the model's most likely one.
        assert e.token == e.top_logprobs[0].token and e.logprob == pytest.approx(tops[0])
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token or "\ufffd" in e.token


def test_completion_logprobs_have_one_entry_per_token(client, model, no_eos):
    resp = client.completions.create(model=model, prompt="Numbers:", max_tokens=4, temperature=0, logprobs=2,
                                     logit_bias=no_eos)
    lp = resp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 4
    assert lp.text_offset == sorted(lp.text_offset)
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(top) <= 2 and chosen == pytest.approx(max(top.values()))


def test_a_repeated_prompt_reports_its_prefix_as_cached_tokens(client, model, server, no_eos):
    args = dict(model=model, messages=[{"role": "user", "content": _unique()}], max_tokens=3, temperature=0,
                logit_bias=no_eos, extra_body=NO_THINKING)
    first = client.chat.completions.create(**args)
    assert first.usage.prompt_tokens > 3 * server.state.info.page_size
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    second = client.chat.completions.create(**args)
    cached = second.usage.prompt_tokens_details.cached_tokens
    page = server.state.info.page_size
    # Whole pages only, and never the last prompt token (it must be recomputed to sample).
    assert 0 < cached < second.usage.prompt_tokens
    assert cached % page == 0 and cached >= second.usage.prompt_tokens - 2 * page
    assert second.timings["cache_n"] == cached
    assert second.choices[0].message.content == first.choices[0].message.content


def test_cache_prompt_false_computes_the_whole_prompt_afresh_and_still_caches_it(client, model, no_eos):
    args = dict(model=model, messages=[{"role": "user", "content": _unique()}], max_tokens=3, temperature=0,
                logit_bias=no_eos)
    first = client.chat.completions.create(**args, extra_body=NO_THINKING)
    fresh = client.chat.completions.create(**args, extra_body={**NO_THINKING, "cache_prompt": False})
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0 and fresh.timings["cache_n"] == 0  # llama.cpp's
    assert fresh.choices[0].message.content == first.choices[0].message.content
    again = client.chat.completions.create(**args, extra_body=NO_THINKING)
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_returned_token_ids_sent_back_as_a_completion_prompt_hit_the_cache(client, model, server, no_eos):
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": _unique()}], max_tokens=4, temperature=0,
        logit_bias=no_eos, extra_body={**NO_THINKING, "return_token_ids": True},
    )
    prompt_ids, out_ids = chat.prompt_token_ids, chat.choices[0].token_ids
    assert len(out_ids) == 4
    follow = client.completions.create(model=model, prompt=prompt_ids + out_ids, max_tokens=2, temperature=0,
                                       logit_bias=no_eos)
    assert follow.usage.prompt_tokens == len(prompt_ids) + 4
    # At least the chat prompt's whole pages are reused (the output's may be too).
    page = server.state.info.page_size
    assert follow.usage.prompt_tokens_details.cached_tokens >= len(prompt_ids) - len(prompt_ids) % page - page
    assert follow.usage.prompt_tokens_details.cached_tokens > 0


def test_an_sdk_error_carries_the_servers_message_and_param(client, model):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=-1)
    assert err.value.status_code == 400
    assert err.value.body["param"] == "max_tokens"
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    assert "no-such-model" in err.value.body["message"]


def test_streams_return_the_prompt_ids_once_and_token_ids_that_add_up_to_the_whole(client, model, no_eos):
    extra = {**NO_THINKING, "return_token_ids": True}
    chat_args = dict(model=model, messages=[{"role": "user", "content": "ids please"}], max_tokens=5,
                     temperature=0, logit_bias=no_eos, extra_body=extra)
    whole = client.chat.completions.create(**chat_args)
    chunks = list(client.chat.completions.create(**chat_args, stream=True))
    assert [getattr(c, "prompt_token_ids", None) for c in chunks if getattr(c, "prompt_token_ids", None)] == [
        whole.prompt_token_ids]
    streamed = [t for c in chunks for ch in c.choices for t in (getattr(ch, "token_ids", None) or [])]
    assert streamed == whole.choices[0].token_ids

    comp_args = dict(model=model, prompt="ids please", max_tokens=5, n=2, temperature=0, logit_bias=no_eos,
                     extra_body={"return_token_ids": True})
    whole = client.completions.create(**comp_args)
    chunks = list(client.completions.create(**comp_args, stream=True))
    for index in (0, 1):
        mine = [ch for c in chunks for ch in c.choices if ch.index == index]
        prompts = [ch.prompt_token_ids for ch in mine if getattr(ch, "prompt_token_ids", None)]
        assert prompts == [whole.choices[index].prompt_token_ids]
        assert [t for ch in mine for t in ch.token_ids] == whole.choices[index].token_ids


def test_concurrent_requests_each_get_their_own_complete_answer(client, model, no_eos):
    from concurrent.futures import ThreadPoolExecutor

    def ask(i: int):
        args = dict(model=model, messages=[{"role": "user", "content": f"Question number {i}"}], max_tokens=4 + i,
                    temperature=0, logit_bias=no_eos, extra_body=NO_THINKING)
        if i % 2:
            chunks = list(client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
            return chunks[-1].usage.completion_tokens, [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        resp = client.chat.completions.create(**args)
        return resp.usage.completion_tokens, resp.choices[0].finish_reason

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(ask, range(4)))
    assert results == [(4 + i, "length") for i in range(4)]


def test_a_call_the_model_left_open_at_its_end_reads_whole_as_its_stream_reads_it(client, model, server,
                                                                                  monkeypatch):
    # With no grammar holding calls, a model may end its turn inside one; a stream has announced that call
    # before the end comes, so the whole answer must not turn the same text into markup as content.
    import server.routes.chat as chat_route
    from server.generation import ChoiceResult

    end = next(iter(server.state.engine.eos_ids))
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'

    async def ended_in_a_call(stream, http_request, engine, n):
        engine.abort(stream.request_id)
        return [ChoiceResult(0, text=text, token_ids=[1, 2, 3], finish_reason="stop", stop_token=end)]

    monkeypatch.setattr(chat_route, "collect", ended_in_a_call)
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                       tools=[WEATHER_TOOL], max_tokens=4, extra_body=NO_THINKING)
    message = r.choices[0].message
    assert message.content is None and [(c.function.name, c.function.arguments) for c in message.tool_calls] == \
        [("get_weather", '{"city": "Pa')]
    assert r.choices[0].finish_reason == "stop"  # an unfinished call is no call an agent may run
