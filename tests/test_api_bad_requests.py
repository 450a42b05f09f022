"""A table of client mistakes against a live server: each gets the right status and envelope.

Every row is one bad request with the status, the error `type`, the `param`
(when the mistake is one field) and words the message must contain, so a
client reading only the message learns what to fix. None may be a 500.
After the whole table runs, the server still answers a good request and its
metrics hold no 500.

The server runs with a short context (`--max-model-len 128`) so an
over-long prompt is cheap to build, and two slots (`--parallel 2`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from live_server import live_server

N_CTX = 128
USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}
DEEP: list = []
for _ in range(900):  # example data nested deeper than the template's tojson can recurse
    DEEP = [DEEP]


@dataclass
class Bad:
    name: str
    path: str
    body: Any = None  # JSON body, unless `raw` is given
    status: int = 400
    type: str = "invalid_request_error"
    param: str | None = None  # exact param, when the mistake is one field
    words: tuple[str, ...] = ()  # each must appear in the message (case-insensitive)
    method: str = "POST"
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def chat(**fields) -> dict:
    return {"messages": USER, "max_tokens": 2, **fields}


def completion(**fields) -> dict:
    return {"prompt": "hi", "max_tokens": 2, **fields}


C, P = "/v1/chat/completions", "/v1/completions"
JSON = {"content-type": "application/json"}

CASES = [
    # -- the body itself
    Bad("malformed JSON", C, raw=b'{"messages": [', headers=JSON, words=("JSON",)),
    Bad("a JSON array, not an object", C, body=[1, 2], words=("JSON object",)),
    Bad("no body at all", C, raw=b"", headers=JSON, words=("JSON body",)),
    Bad("form-encoded body", C, raw=b"messages=hi", headers={"content-type": "application/x-www-form-urlencoded"},
        status=415, words=("application/json",)),
    Bad("unknown top-level field", C, body=chat(temprature=0.5), param="temprature", words=("temprature",)),
    # -- messages
    Bad("messages missing", C, body={"max_tokens": 2}, param="messages", words=("messages", "required")),
    Bad("messages empty", C, body=chat(messages=[]), param="messages", words=("messages", "at least 1")),
    Bad("messages not a list", C, body=chat(messages="hi"), param="messages", words=("messages", "list")),
    Bad("unknown role", C, body=chat(messages=[{"role": "wizard", "content": "x"}]), param="messages.0.role",
        words=("role", "'user'")),
    Bad("content of the wrong type", C, body=chat(messages=[{"role": "user", "content": 42}]),
        param="messages.0.content", words=("content",)),
    Bad("user message without content", C, body=chat(messages=[{"role": "user"}]), param="messages.0.content",
        words=("needs content",)),
    Bad("image content part", C, body=chat(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]), words=("image", "text-only")),
    Bad("content part type not a string", C, body=chat(messages=[{"role": "user", "content": [{"type": [1]}]}]),
        param="messages.0.content.0.type", words=("string",)),
    Bad("a lone surrogate in the content", C, raw=b'{"messages": [{"role": "user", "content": "a\\ud800"}]}',
        headers=JSON, param="messages.0.content", words=("surrogate",)),
    Bad("a lone surrogate in a logit_bias key", C, raw=b'{"messages": [{"role": "user", "content": "a"}], '
        b'"logit_bias": {"\\ud800": 1}}', headers=JSON, param="logit_bias", words=("surrogate",)),
    Bad("tool message without tool_call_id", C, body=chat(messages=[{"role": "tool", "content": "42"}]),
        param="messages.0.tool_call_id", words=("tool_call_id",)),
    Bad("tool-call arguments as an object", C, body=chat(messages=USER + [{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]),
        words=("arguments", "JSON-encoded string")),
    # -- sampling fields
    Bad("max_tokens negative", C, body=chat(max_tokens=-1), param="max_tokens", words=("max_tokens",)),
    Bad("max_tokens zero", C, body=chat(max_tokens=0), param="max_tokens", words=("max_tokens",)),
    Bad("max_tokens absurd", C, body=chat(max_tokens=2**40), param="max_tokens", words=("2147483647",)),
    Bad("max_tokens as a string", C, body=chat(max_tokens="10"), param="max_tokens", words=("integer",)),
    Bad("max_completion_tokens zero", C, body=chat(max_completion_tokens=0), param="max_completion_tokens",
        words=("max_completion_tokens",)),
    Bad("n zero", C, body=chat(n=0), param="n", words=("greater than or equal to 1",)),
    Bad("n absurd", C, body=chat(n=1000), param="n", words=("128",)),
    Bad("temperature above 2", C, body=chat(temperature=5), param="temperature", words=("temperature",)),
    Bad("top_p zero", C, body=chat(top_p=0), param="top_p", words=("top_p",)),
    Bad("seed as a float", C, body=chat(seed=1.5), param="seed", words=("integer",)),
    Bad("stop with an empty string", C, body=chat(stop=[""]), param="stop.0", words=("empty",)),
    Bad("too many stop strings", C, body=chat(stop=[f"s{i}" for i in range(20)]), param="stop", words=("16",)),
    Bad("stream_options without stream", C, body=chat(stream_options={"include_usage": True}),
        param="stream_options", words=("stream",)),
    Bad("logit_bias key not a token id", C, body=chat(logit_bias={"abc": 1}), param="logit_bias.abc",
        words=("token id",)),
    Bad("logit_bias value out of range", C, body=chat(logit_bias={"5": 500}), param="logit_bias.5",
        words=("100",)),
    Bad("logit_bias token outside the vocabulary", C, body=chat(logit_bias={"100000": 1}),
        param="logit_bias.100000", words=("100000", "vocabulary")),
    Bad("stop_token_ids outside the vocabulary", C, body=chat(stop_token_ids=[100000]), param="stop_token_ids.0",
        words=("100000", "vocabulary")),
    Bad("top_logprobs without logprobs", C, body=chat(top_logprobs=2), param="top_logprobs", words=("logprobs",)),
    Bad("top_logprobs above 20", C, body=chat(logprobs=True, top_logprobs=50), param="top_logprobs",
        words=("20",)),
    Bad("response_format json_schema without a name", C,
        body=chat(response_format={"type": "json_schema", "json_schema": {}}),
        param="response_format.json_schema.name", words=("name",)),
    Bad("response_format json_object with ignore_eos", C,
        body=chat(response_format={"type": "json_object"}, ignore_eos=True), param="ignore_eos",
        words=("ignore_eos", "json_object")),
    Bad("response_format json_schema the grammar engine cannot enforce", C,
        body=chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "string", "pattern": "(?<=a)b"}}}),
        param="response_format.json_schema.schema", words=("cannot be enforced", "look-around")),
    Bad("response_format json_schema that only refers to itself", C,
        body=chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#"}}}),
        param="response_format.json_schema.schema", words=("cannot be enforced", "can begin")),
    Bad("response_format json_schema whose definitions refer to each other in a ring", C,
        body=chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}}}),
        param="response_format.json_schema.schema", words=("cannot be enforced", "can begin")),
    Bad("response_format json_schema whose required property can begin but never end", C,
        body=chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"],
            "$defs": {"A": {"$ref": "#/$defs/A"}}}}}),
        param="response_format.json_schema.schema", words=("cannot be enforced", "#/$defs/A", "can end")),
    Bad("tool parameters whose required property can begin but never end", C,
        body=chat(tool_choice="required", tools=[{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"],
            "$defs": {"A": {"$ref": "#/$defs/A"}}}}}]),
        param="tools.0.function.parameters", words=("Invalid schema for function 'f'", "#/$defs/A")),
    Bad("tool parameters that are the empty ref, itself", C,
        body=chat(tool_choice="required", tools=[{"type": "function", "function": {"name": "f", "parameters": {
            "$ref": ""}}}]), param="tools.0.function.parameters", words=("Invalid schema for function 'f'",)),
    Bad("tool parameters whose $id refers to itself", C,
        body=chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {
            "$id": "urn:x", "$ref": "urn:x"}}}]), param="tools.0.function.parameters", words=("can end",)),
    Bad("response_format json_schema whose required property is the empty ref", C,
        body=chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"$ref": ""}}, "required": ["a"]}}}),
        param="response_format.json_schema.schema", words=("cannot be enforced",)),
    Bad("tool parameters nested past the template's recursion", C,
        body=chat(tools=[TOOL, {"type": "function", "function": {"name": "deep", "parameters": {
            "type": "object", "examples": DEEP}}}]), param="tools.1.function.parameters",
        words=("could not render tools.1.function.parameters",)),
    Bad("Responses text.format name with a space", "/v1/responses",
        body={"input": "x", "text": {"format": {"type": "json_schema", "name": "has space", "schema": {}}}},
        param="text.format.name", words=("text.format.name:",)),
    Bad("Responses function_call_output answering no call", "/v1/responses",
        body={"input": [{"type": "message", "role": "user", "content": "hi"},
                        {"type": "function_call_output", "call_id": "call_nope", "output": "{}"}]},
        param="input.1.call_id", words=("call_nope", "no function call")),
    Bad("Responses function_call left unanswered", "/v1/responses",
        body={"input": [{"type": "message", "role": "user", "content": "hi"},
                        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                        {"type": "message", "role": "user", "content": "never mind"}]},
        param="input", words=("call_1", "function_call_output")),
    Bad("Responses include value misspelt", "/v1/responses",
        body={"input": "x", "include": ["message.output_text.logprobz"]}, param="include.0",
        words=("include.0", "message.output_text.logprobs")),
    Bad("Responses json_schema format without its schema", "/v1/responses",
        body={"input": "x", "text": {"format": {"type": "json_schema", "name": "out"}}}, param="text.format.schema",
        words=("text.format.schema", "required")),
    Bad("Responses stream_options without stream", "/v1/responses",
        body={"input": "x", "stream_options": {"include_obfuscation": False}}, param="stream_options",
        words=("stream_options", "stream is true")),
    Bad("Responses stream_options unknown key", "/v1/responses",
        body={"input": "x", "stream": True, "stream_options": {"include_usage": True}},
        param="stream_options.include_usage", words=("include_usage",)),
    Bad("Responses reasoning effort unknown", "/v1/responses", body={"input": "x", "reasoning": {"effort": "extreme"}},
        param="reasoning.effort", words=("reasoning.effort:",)),
    Bad("a known route with a trailing slash", C + "/", body=chat(), status=404, type="not_found_error",
        words=(C + "/",)),
    Bad("chat_template_kwargs that break the template", C, body=chat(chat_template_kwargs={"namespace": 1}),
        param="chat_template_kwargs", words=("chat_template_kwargs",)),
    Bad("chat_template_kwargs setting a reserved key", C, body=chat(chat_template_kwargs={"tools": []}),
        param="chat_template_kwargs.tools", words=("tools",)),
    Bad("chat_template_kwargs bringing the client's own template", C,
        body=chat(chat_template_kwargs={"chat_template": "{% for i in range(99999999) %}{% endfor %}"}),
        param="chat_template_kwargs.chat_template", words=("chat_template", "own chat template")),
    # -- tools
    Bad("tool_choice a number", C, body=chat(tools=[TOOL], tool_choice=1), param="tool_choice"),
    Bad("a body that is not UTF-8", C, raw=b'{"messages": [{"role": "user", "content": "\xff"}]}', headers=JSON,
        words=("not UTF-8", "byte 43")),
    Bad("a body holding an integer past the parser's limit", C, raw=b'{"messages": [], "n": ' + b"7" * 5000 + b"}",
        headers=JSON, words=("4300 digits",)),
    Bad("a body nested past the parser's limit", C, raw=b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        headers=JSON, words=("nests too deeply",)),
    Bad("tool_choice an unknown word", C, body=chat(tools=[TOOL], tool_choice="sometimes"), param="tool_choice",
        words=("sometimes",)),
    Bad("tool_choice required without tools", C, body=chat(tool_choice="required"), param="tool_choice",
        words=("at least one tool",)),
    Bad("tool_choice naming an unknown function", C,
        body=chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "nope"}}),
        param="tool_choice.function.name", words=("nope",)),
    Bad("a tool of another type", C, body=chat(tools=[{"type": "retrieval", "function": {"name": "f"}}]),
        param="tools.0.type", words=("function",)),
    Bad("two tools with one name", C, body=chat(tools=[TOOL, TOOL]), param="tools.1.function.name",
        words=("get_weather",)),
    # -- the model and the context
    Bad("unknown model", C, body=chat(model="gpt-9"), status=404, type="not_found_error", param="model",
        words=("gpt-9",)),
    Bad("chat prompt longer than the context", C, body=chat(messages=[{"role": "user", "content": "word " * 400}]),
        type="exceed_context_size_error", param="messages", words=("context",)),
    Bad("token prompt longer than the context", P, body=completion(prompt=[5] * (N_CTX + 10)),
        type="exceed_context_size_error", param="prompt", words=(str(N_CTX + 10), str(N_CTX))),
    Bad("slot id beyond --parallel", C, body=chat(id_slot=9), status=404, type="not_found_error", param="id_slot",
        words=("slot 9", "--parallel")),
    # -- completions
    Bad("completion prompt missing", P, body={"max_tokens": 2}, param="prompt", words=("prompt", "required")),
    Bad("completion prompt empty, and no BOS to continue from", P, body=completion(prompt=""), param="prompt",
        words=("empty",)),
    Bad("a batch's empty prompt, and no BOS to continue from", P, body=completion(prompt=["a", ""]),
        param="prompt.1", words=("prompt.1", "empty")),
    Bad("more prompts than a request holds", P, body=completion(prompt=["a"] * 200), param="prompt",
        words=("200 prompts", "128")),
    Bad("a batch's token id outside the vocabulary", P, body=completion(prompt=[[1], [2, 100000]]),
        param="prompt.1.1", words=("100000", "vocabulary")),
    Bad("prompt token id outside the vocabulary", P, body=completion(prompt=[1, 2, 100000]), param="prompt.2",
        words=("100000", "vocabulary")),
    Bad("negative prompt token id", P, body=completion(prompt=[1, -3]), param="prompt.1", words=("-3",)),
    Bad("max_tokens 0 without echo", P, body=completion(max_tokens=0), param="max_tokens", words=("echo",)),
    Bad("suffix", P, body=completion(suffix="end"), param="suffix", words=("suffix",)),
    Bad("best_of", P, body=completion(best_of=3), param="best_of", words=("best_of",)),
    Bad("completion logprobs above 5", P, body=completion(logprobs=10), param="logprobs", words=("5",)),
    Bad("completion with a chat field", P, body=completion(messages=USER), param="messages",
        words=("messages",)),
    # -- the small routes
    Bad("tokenize without content", "/tokenize", body={}, param="content", words=("content", "required")),
    Bad("tokenize a lone surrogate", "/tokenize", raw=b'{"content": "\\udfff"}', headers=JSON, param="content",
        words=("surrogate",)),
    Bad("a completion prompt with a lone surrogate", P, raw=b'{"prompt": "\\ud800x", "max_tokens": 2}', headers=JSON,
        param="prompt", words=("surrogate",)),
    Bad("detokenize a token outside the vocabulary", "/detokenize", body={"tokens": [1, 100000]},
        param="tokens.1", words=("100000", "vocabulary")),
    Bad("detokenize with a lone surrogate in a key", "/detokenize", raw=b'{"tokens": [1], "\\ud800": 1}',
        headers=JSON, words=("surrogate", "key of the body")),
    Bad("detokenize a string", "/detokenize", body={"tokens": "abc"}, param="tokens", words=("list",)),
    # Python's parser reads NaN and Infinity (no JSON), and a number past a float's range as infinite.
    Bad("a NaN temperature", C, raw=b'{"messages": [{"role": "user", "content": "a"}], "temperature": NaN}',
        headers=JSON, param="temperature", words=("NaN or infinite",)),
    Bad("a body that is NaN", C, raw=b"NaN", headers=JSON, words=("the body is NaN",)),
    Bad("a logit bias past a float's range", C, raw=b'{"messages": [{"role": "user", "content": "a"}], '
        b'"logit_bias": {"1": 1e400}}', headers=JSON, param="logit_bias.1", words=("1.8e308",)),
    Bad("Infinity in a Responses tool's schema", "/v1/responses", raw=b'{"input": "a", "tools": [{"type": "function", '
        b'"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number", "maximum": '
        b'-Infinity}}}}]}', headers=JSON, param="tools.0.parameters.properties.x.maximum", words=("NaN or infinite",)),
    Bad("unknown route", "/v1/embeddings", body={"input": "x"}, status=404, type="not_found_error",
        words=("/v1/embeddings",)),
    Bad("wrong method", C, method="GET", status=405, words=("GET", "not allowed")),
]


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3"), max_model_len=N_CTX) as s:
        yield s


def test_the_table_holds_at_least_thirty_distinct_mistakes():
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


def _send(http: httpx.Client, case: Bad) -> httpx.Response:
    kwargs: dict[str, Any] = {"headers": case.headers}
    if case.raw is not None:
        kwargs["content"] = case.raw
    elif case.body is not None:
        kwargs["json"] = case.body
    return http.request(case.method, case.path, **kwargs)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_request_gets_its_status_type_and_a_message_naming_the_problem(http, case):
    r = _send(http, case)
    assert r.status_code != 500
    assert r.status_code == case.status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert err["type"] == case.type, err
    if case.param is not None:
        assert err["param"] == case.param, err
    for word in case.words:
        assert word.lower() in err["message"].lower(), err


@pytest.mark.parametrize("path, tool, param", [
    (C, {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": "city"}}},
     "tools.0.function.parameters"),
    ("/v1/responses", {"type": "function", "name": "f", "parameters": {"type": "object", "required": "city"}},
     "tools.0.parameters"),
])
def test_tool_parameters_that_are_no_json_schema_are_refused_as_openai_refuses_them(http, path, tool, param):
    body = chat(tools=[tool]) if path == C else {"input": "hi", "tools": [tool]}
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["param"], err["code"]) == (param, "invalid_function_parameters")
    assert "Invalid schema for function 'f': 'city' is not of type 'array' (at required)" in err["message"]


@pytest.mark.parametrize("parameters, words", [
    ({"type": "object", "properties": []}, "Invalid schema for function 'g': [] is not of type 'object' (at properties)"),
    ({"type": "object", "properties": {"a": {"type": "strng"}}}, "at properties.a.type"),
])
def test_the_tool_whose_parameters_are_no_schema_is_named_among_good_ones(http, parameters, words):
    good = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    r = http.post(C, json=chat(tools=[good, {"type": "function", "function": {"name": "g", "parameters": parameters}}]))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tools.1.function.parameters" and words in err["message"], err


def test_the_tool_schema_check_runs_once_a_tool_and_off_the_event_loop(http, monkeypatch):
    # The meta-schema walk takes seconds for a schema of megabytes: on the loop it held /health that long.
    import server.engine_params as engine_params

    where: list[str] = []
    check = engine_params.schema_problem

    def spy(schema):
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:
            where.append("a thread without a loop")
        return check(schema)

    monkeypatch.setattr(engine_params, "schema_problem", spy)
    tools = [{"type": "function", "name": name, "parameters": {"type": "object"}} for name in ("f", "g")]
    r = http.post("/v1/responses", json={"input": "hi", "tools": tools, "max_output_tokens": 1})
    assert r.status_code in (200, 400), r.text
    assert where == ["a thread without a loop"] * 2


def _nested(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return {"type": "object", "properties": {"a": schema}}


@pytest.mark.parametrize("parameters, words", [
    ({"$schema": 5}, "$schema must be a string"),
    ({"$schema": []}, "$schema must be a string"),
    (_nested(600), "nests too deeply"),
])
def test_tool_parameters_the_check_cannot_read_are_a_400_not_a_500(http, parameters, words):
    r = http.post(C, json=chat(tools=[{"type": "function", "function": {"name": "f", "parameters": parameters}}]))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tools.0.function.parameters" and words in err["message"], err


def test_a_draft_7_schema_without_a_dialect_is_a_schema_the_tool_may_use(http):
    # pydantic v1 writes a tuple as draft 7's `"items": [...]` (2020-12's `prefixItems`), naming no dialect.
    pair = {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "minItems": 2, "maxItems": 2}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"pair": pair}}}}
    r = http.post(C, json=chat(tools=[tool], max_tokens=1))
    assert r.status_code == 200 or r.json()["error"]["param"] != "tools.0.function.parameters", r.text
    strict = {"$schema": "https://json-schema.org/draft/2020-12/schema", **tool["function"]["parameters"]}
    r = http.post(C, json=chat(tools=[{"type": "function", "function": {"name": "f", "parameters": strict}}]))
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools.0.function.parameters", r.text


def test_a_pattern_in_ecma_regex_syntax_is_a_schema_the_tool_may_use(http):
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "^\\p{Lu}+$"}}}}}
    r = http.post(C, json=chat(tools=[tool], max_tokens=1))
    # (the chat may outgrow this server's short context; its schema is checked before that)
    assert r.status_code == 200 or r.json()["error"]["param"] != "tools.0.function.parameters", r.text


def test_a_past_call_whose_arguments_escape_a_lone_surrogate_renders_as_the_client_wrote_it(http):
    # Valid JSON text whose parsed string is no Unicode: the template gets the client's string, not a 500.
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                   "name": "get_weather", "arguments": '{"city": "\\ud800"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    r = http.post(C, json=chat(messages=history))
    assert r.status_code == 200, r.text
    r = http.post("/apply-template", json={"messages": history})
    assert r.status_code == 200 and "\\ud800" in r.json()["prompt"], r.text


def test_an_over_long_prompt_reports_its_size_and_the_context(http):
    r = http.post(P, json=completion(prompt=[5] * (N_CTX + 10)))
    err = r.json()["error"]
    assert (err["n_prompt_tokens"], err["n_ctx"]) == (N_CTX + 10, N_CTX)
    assert err["code"] == "context_length_exceeded"


@pytest.mark.parametrize("path, body, param", [
    (P, completion(prompt="word " * 200_000), "prompt"),
    (C, chat(messages=[{"role": "user", "content": "word " * 200_000}]), "messages"),
    ("/v1/responses", {"input": "word " * 200_000, "max_output_tokens": 2}, "input"),
])
def test_a_prompt_no_tokenization_could_fit_is_refused_before_it_is_counted(http, path, body, param):
    err = http.post(path, json=body).json()["error"]
    assert (err["code"], err["param"], err["n_ctx"]) == ("context_length_exceeded", param, N_CTX)
    assert "without counting" in err["message"] and err["n_prompt_tokens"] >= N_CTX


def test_a_prompt_of_exactly_the_context_is_refused_one_shorter_is_served(http):
    assert http.post(P, json=completion(prompt=[5] * N_CTX)).status_code == 400
    ok = http.post(P, json=completion(prompt=[5] * (N_CTX - 1), max_tokens=5, temperature=0))
    assert ok.status_code == 200, ok.text
    # The context caps the generation: one token fits.
    assert ok.json()["usage"]["completion_tokens"] == 1
    assert ok.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.slow
def test_the_server_keeps_serving_after_the_table_and_never_answered_500(http):
    for case in CASES:  # run the table again here, so this test stands on its own
        assert _send(http, case).status_code < 500, case.name
    good = http.post(C, json=chat(max_tokens=3))
    assert good.status_code == 200, good.text
    assert good.json()["usage"]["completion_tokens"] >= 1
    metrics = http.get("/metrics").text
    assert 'status="500"' not in metrics
    assert 'status="400"' in metrics
