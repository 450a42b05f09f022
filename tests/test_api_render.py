"""vLLM's /tokenize forms and llama.cpp's /apply-template: a request's prompt, without running it.

`{"messages", ...}` renders a chat request exactly as /v1/chat/completions
does -- the tokens it reports are the ones a chat completion of the same body
runs (`prompt_token_ids`) -- and `/apply-template` answers the same rendering
as text. `{"prompt"}` counts a completion prompt's tokens. Each form is told
apart by its key, and its errors name its fields. `continue_final_message`
leaves the final assistant message open, and the chat route answers what the
model adds to it.
"""

from __future__ import annotations

import httpx
import pytest

from live_server import live_server

MESSAGES = [{"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": "What is the weather in Lima?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        yield s


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=60)


def test_a_tokenized_chat_is_the_prompt_a_chat_completion_of_the_same_body_runs(server):
    body = {"messages": MESSAGES, "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}}
    ran = _post(server, "/v1/chat/completions", {**body, "max_tokens": 1, "return_token_ids": True})
    assert ran.status_code == 200, ran.text
    counted = _post(server, "/tokenize", body)
    assert counted.status_code == 200, counted.text
    answer = counted.json()
    assert answer["tokens"] == ran.json()["prompt_token_ids"]
    assert answer["count"] == len(answer["tokens"]) and answer["max_model_len"] == server.state.info.max_model_len
    assert "token_strs" not in answer

    text = _post(server, "/apply-template", body).json()["prompt"]
    assert server.tokenize(text) == answer["tokens"], "the template's text is the same prompt"
    # Qwen3 with thinking off opens the turn with an empty thought: the prompt as the model runs it.
    assert "get_weather" in text and text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_a_chat_without_the_generation_prompt_renders_the_conversation_alone(server):
    whole = _post(server, "/tokenize", {"messages": MESSAGES}).json()["tokens"]
    bare = _post(server, "/tokenize", {"messages": MESSAGES, "add_generation_prompt": False,
                                       "return_token_strs": True}).json()
    assert whole[:len(bare["tokens"])] == bare["tokens"] and len(bare["tokens"]) < len(whole)
    assert bare["token_strs"] == server.state.tokenizer.convert_ids_to_tokens(bare["tokens"])


def test_vllms_prompt_form_counts_a_completion_prompts_tokens(server):
    answer = _post(server, "/tokenize", {"prompt": "Ships leave at dawn.", "model": None}).json()
    assert answer["tokens"] == server.tokenize("Ships leave at dawn.") and answer["count"] == len(answer["tokens"])
    llama = _post(server, "/tokenize", {"content": "Ships leave at dawn."}).json()
    assert llama == {"tokens": answer["tokens"]}, "llama.cpp's form keeps its own shape"


@pytest.mark.parametrize("path, body, param", [
    ("/tokenize", {"text": "no form names this"}, "content"),
    ("/tokenize", {"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
    ("/tokenize", {"prompt": 7}, "prompt"),
    ("/tokenize", {"prompt": "hi", "add_special": True}, "add_special"),
    ("/apply-template", {"messages": []}, "messages"),
])
def test_a_malformed_render_request_is_a_400_naming_the_field(server, path, body, param):
    r = _post(server, path, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_a_render_request_for_another_model_is_a_404_naming_it(server):
    for path in ("/tokenize", "/apply-template"):
        r = _post(server, path, {"messages": MESSAGES, "model": "someone-else"})
        assert r.status_code == 404 and "someone-else" in r.json()["error"]["message"], (path, r.text)


PREFILLED = [{"role": "user", "content": "Name a harbour."},
             {"role": "assistant", "content": "The harbour I would name is"}]


def test_continue_final_message_leaves_the_assistants_words_open_and_the_model_goes_on(server):
    body = {"messages": PREFILLED, "add_generation_prompt": False, "continue_final_message": True,
            "chat_template_kwargs": {"enable_thinking": False}}
    text = _post(server, "/apply-template", body).json()["prompt"]
    assert text.endswith("The harbour I would name is"), "no end-of-turn after the client's words"
    no_eos = {str(server.token_id(t)): -100 for t in ("<|im_end|>", "<|endoftext|>")}
    chat = _post(server, "/v1/chat/completions", {**body, "max_tokens": 5, "temperature": 0, "logit_bias": no_eos,
                                                  "return_token_ids": True}).json()
    raw = _post(server, "/v1/completions", {"prompt": text, "max_tokens": 5, "temperature": 0,
                                            "logit_bias": no_eos}).json()
    assert chat["prompt_token_ids"] == server.tokenize(text)
    assert chat["choices"][0]["message"]["content"] == raw["choices"][0]["text"], \
        "the answer is what the model added, as a raw completion of the same prompt"


def test_a_chat_without_the_generation_prompt_ends_after_the_last_message(server):
    text = _post(server, "/apply-template", {"messages": MESSAGES, "add_generation_prompt": False}).json()["prompt"]
    assert text.endswith("What is the weather in Lima?<|im_end|>\n")


@pytest.mark.parametrize("body, param", [
    ({"messages": PREFILLED, "continue_final_message": True}, "continue_final_message"),
    ({"messages": MESSAGES, "add_generation_prompt": False, "continue_final_message": True}, "messages"),
    ({"messages": MESSAGES, "chat_template_kwargs": {"continue_final_message": True}},
     "chat_template_kwargs.continue_final_message"),
])
def test_a_contradictory_continuation_is_a_400_naming_the_field(server, body, param):
    for path in ("/v1/chat/completions", "/apply-template"):
        r = _post(server, path, body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (path, r.text)


def test_detokenize_answers_llama_cpps_content_and_vllms_prompt_and_checks_a_named_model(server):
    ids = server.tokenize("Ships leave at dawn.")
    r = _post(server, "/detokenize", {"model": server.state.info.served_model_name, "tokens": ids})
    assert r.json() == {"content": "Ships leave at dawn.", "prompt": "Ships leave at dawn."}
    r = _post(server, "/detokenize", {"model": "someone-else", "tokens": ids})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


def test_the_chat_form_takes_vllms_add_special_tokens(server):
    plain = _post(server, "/tokenize", {"messages": MESSAGES, "add_special_tokens": False}).json()["tokens"]
    special = _post(server, "/tokenize", {"messages": MESSAGES, "add_special_tokens": True}).json()["tokens"]
    bos = server.state.tokenizer.encode("", add_special_tokens=True)  # what the tokenizer adds (none for Qwen)
    assert special == bos + plain or special == plain + bos


def test_continuing_a_thought_the_client_opened_comes_back_as_reasoning(server):
    messages = [PREFILLED[0], {"role": "assistant", "content": "<think>\nFirst, the harbour"}]
    body = {"messages": messages, "add_generation_prompt": False, "continue_final_message": True}
    text = _post(server, "/apply-template", body).json()["prompt"]
    assert text.endswith("<think>\nFirst, the harbour")
    no_end = {str(server.token_id(t)): -100 for t in ("<|im_end|>", "<|endoftext|>", "</think>")}
    chat = _post(server, "/v1/chat/completions", {**body, "max_tokens": 5, "temperature": 0, "logit_bias": no_end})
    raw = _post(server, "/v1/completions", {"prompt": text, "max_tokens": 5, "temperature": 0, "logit_bias": no_end})
    message = chat.json()["choices"][0]["message"]
    assert message.get("reasoning_content") == raw.json()["choices"][0]["text"] and message.get("content") is None


def test_a_prefilled_open_thought_counts_against_the_reasoning_budget(server):
    thought = "\nFirst, the harbour"
    messages = [PREFILLED[0], {"role": "assistant", "content": "<think>" + thought}]
    already = len(server.state.tokenizer.encode(thought, add_special_tokens=False))
    closer = server.token_id("</think>")
    no_end = {str(server.token_id(t)): -100 for t in ("<|im_end|>", "<|endoftext|>", "</think>")}
    for extra in (0, 3):
        r = _post(server, "/v1/chat/completions", {
            "messages": messages, "add_generation_prompt": False, "continue_final_message": True,
            "reasoning_budget_tokens": already + extra, "max_tokens": 8, "temperature": 0, "logit_bias": no_end,
            "return_token_ids": True}).json()
        ids = r["choices"][0]["token_ids"]
        assert ids[extra] == closer, (extra, ids)  # the prefill's tokens were spent; `extra` more, then closed


def test_reasoning_effort_reaches_a_template_that_reads_it_and_an_explicit_kwarg_wins(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3", template="harmony")) as harmony:
        def rendered(**fields) -> str:
            r = _post(harmony, "/apply-template", {"messages": MESSAGES, **fields})
            assert r.status_code == 200, r.text
            return r.json()["prompt"]
        assert "Reasoning: medium" in rendered(), "the template's own default"
        assert "Reasoning: low" in rendered(reasoning_effort="low")
        assert "Reasoning: high" in rendered(reasoning_effort="low", chat_template_kwargs={"reasoning_effort": "high"})
        ran = _post(harmony, "/v1/responses", {"input": "hi", "reasoning": {"effort": "low"}, "max_output_tokens": 1})
        assert ran.status_code == 200, ran.text


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {"messages": MESSAGES, "reasoning_effort": "extreme"}, "reasoning_effort"),
    ("/v1/responses", {"input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
])
def test_an_unknown_reasoning_effort_is_a_400_naming_the_field(server, path, body, param):
    r = _post(server, path, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_openais_routing_hints_are_accepted_and_change_nothing(server):
    body = {"messages": MESSAGES}
    hinted = _post(server, "/tokenize", {**body, "service_tier": "auto", "prompt_cache_key": "user-7",
                                         "safety_identifier": "u7", "verbosity": "low"})
    assert hinted.status_code == 200, hinted.text
    assert hinted.json()["tokens"] == _post(server, "/tokenize", body).json()["tokens"]
    loud = _post(server, "/v1/chat/completions", {**body, "verbosity": "loud"})
    assert loud.status_code == 400 and loud.json()["error"]["param"] == "verbosity", loud.text
