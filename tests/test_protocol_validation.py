"""Request validation: every bad request is a 400 that names the failing field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from server.chat_prompt import template_messages
from server.errors import api_error_from_validation
from server.protocol import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionRequest,
    ChoiceDelta,
    ChunkChoice,
    CompletionRequest,
    DeltaFunction,
    DeltaToolCall,
    DetokenizeRequest,
    NamedToolChoice,
    Timings,
    TokenizeRequest,
    Usage,
)

USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def chat(**fields):
    return {"messages": USER, **fields}


def msg(**fields):
    return {"messages": [fields]}


# (case id, request body, expected `param`, text the message must contain)
BAD_CHAT = [
    ("empty messages", {"messages": []}, "messages", "at least 1"),
    ("messages not a list", {"messages": "hi"}, "messages", "list"),
    ("messages missing", {}, "messages", "required"),
    ("unknown role", msg(role="bot", content="x"), "messages.0.role", "'assistant'"),
    ("tool message without tool_call_id", msg(role="tool", content="42"), "messages.0.tool_call_id", "tool_call_id"),
    ("user message without content", msg(role="user"), "messages.0.content", "content"),
    ("tool_calls on a user message", msg(role="user", content="x", tool_calls=[]), "messages.0.tool_calls", "assistant"),
    ("tool_call_id on a user message", msg(role="user", content="x", tool_call_id="c"), "messages.0.tool_call_id", "tool"),
    ("unknown field on a message", msg(role="user", content="x", mood="sad"), "messages.0.mood", "mood"),
    ("content of the wrong type", msg(role="user", content=5), "messages.0.content", "string"),
    ("image content part", msg(role="user", content=[{"type": "image_url", "image_url": {"url": "u"}}]),
     "messages.0.content.0", "image"),
    ("unknown content part", msg(role="user", content=[{"type": "input_audio"}]), "messages.0.content.0.type", "input_audio"),
    ("text part without text", msg(role="user", content=[{"type": "text"}]), "messages.0.content.0.text", "text"),
    ("tool call arguments as an object",
     msg(role="assistant", tool_calls=[{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]),
     "messages.0.tool_calls.0.function.arguments", "JSON-encoded string"),
    ("named tool_choice not in tools", chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "nope"}}),
     "tool_choice.function.name", "nope"),
    ("named tool_choice with no tools", chat(tool_choice={"type": "function", "function": {"name": "f"}}),
     "tool_choice.function.name", "none"),
    ("tool_choice required without tools", chat(tool_choice="required"), "tool_choice", "at least one tool"),
    ("tool_choice unknown word", chat(tool_choice="sometimes"), "tool_choice", "sometimes"),
    ("tool_choice object without function", chat(tools=[TOOL], tool_choice={"type": "function"}), "tool_choice.function", "required"),
    ("tool of another type", chat(tools=[{"type": "retrieval", "function": {"name": "f"}}]), "tools.0.type", "function"),
    ("tool name with a space", chat(tools=[{"type": "function", "function": {"name": "get weather"}}]),
     "tools.0.function.name", "pattern"),
    ("duplicate tool names", chat(tools=[TOOL, TOOL]), "tools.1.function.name", "get_weather"),
    ("top_logprobs without logprobs", chat(top_logprobs=3), "top_logprobs", "logprobs"),
    ("top_logprobs above 20", chat(logprobs=True, top_logprobs=21), "top_logprobs", "20"),
    ("logprobs as an int", chat(logprobs=1), "logprobs", "boolean"),
    ("reasoning budget -2", chat(reasoning_budget_tokens=-2), "reasoning_budget_tokens",
     "must be between -1 <= value <= 2147483647, but got -2"),
    ("reasoning budget 2**31", chat(reasoning_budget_tokens=2**31), "reasoning_budget_tokens",
     "must be between -1 <= value <= 2147483647, but got 2147483648"),
    ("reasoning budget as a string", chat(reasoning_budget_tokens="5"), "reasoning_budget_tokens", "integer"),
    ("reasoning budget as a float", chat(reasoning_budget_tokens=1.5), "reasoning_budget_tokens", "integer"),
    ("reasoning budget as a bool", chat(reasoning_budget_tokens=True), "reasoning_budget_tokens", "integer"),
    ("thinking budget alias out of range", chat(thinking_budget_tokens=-7), "thinking_budget_tokens", "but got -7"),
    ("both budget names disagreeing", chat(reasoning_budget_tokens=5, thinking_budget_tokens=6),
     "reasoning_budget_tokens", "thinking_budget_tokens"),
    ("max_tokens 0", chat(max_tokens=0), "max_tokens", "greater than or equal to 1"),
    ("max_tokens -1", chat(max_tokens=-1), "max_tokens", "greater than or equal to 1"),
    ("max_tokens huge", chat(max_tokens=2**40), "max_tokens", "2147483647"),
    ("max_tokens 1.0 is not an integer", chat(max_tokens=1.0), "max_tokens", "integer"),
    ("max_tokens as a string", chat(max_tokens="10"), "max_tokens", "integer"),
    ("max_completion_tokens 0", chat(max_completion_tokens=0), "max_completion_tokens", "greater than"),
    ("n 0", chat(n=0), "n", "greater than or equal to 1"),
    ("n 1000", chat(n=1000), "n", "128"),
    ("temperature above 2", chat(temperature=2.5), "temperature", "2"),
    ("temperature as a string", chat(temperature="hot"), "temperature", "number"),
    ("temperature as a bool", chat(temperature=True), "temperature", "number"),
    ("top_p 0", chat(top_p=0), "top_p", "greater than 0"),
    ("top_k below -1", chat(top_k=-2), "top_k", "-1"),
    ("min_p above 1", chat(min_p=1.5), "min_p", "1"),
    ("repetition_penalty 0", chat(repetition_penalty=0), "repetition_penalty", "greater than 0"),
    ("presence_penalty below -2", chat(presence_penalty=-3), "presence_penalty", "-2"),
    ("frequency_penalty above 2", chat(frequency_penalty=2.5), "frequency_penalty", "2"),
    ("seed as a float", chat(seed=1.5), "seed", "integer"),
    ("stop as a number", chat(stop=5), "stop", "string"),
    ("too many stop sequences", chat(stop=["x"] * 17), "stop", "16"),
    ("empty stop sequence", chat(stop=["ok", ""]), "stop.1", "empty"),
    ("negative stop token id", chat(stop_token_ids=[-1]), "stop_token_ids.0", "greater than"),
    ("logit_bias with a non-integer key", chat(logit_bias={"hello": 1}), "logit_bias.hello", "token id"),
    ("logit_bias with a float key", chat(logit_bias={"1.5": 1}), "logit_bias.1.5", "token id"),
    ("logit_bias out of range", chat(logit_bias={"12": 101}), "logit_bias.12", "100"),
    ("response_format json_schema without its object", chat(response_format={"type": "json_schema"}),
     "response_format.json_schema", "json_schema"),
    ("response_format json_schema without a name", chat(response_format={"type": "json_schema", "json_schema": {}}),
     "response_format.json_schema.name", "name"),
    ("response_format unknown type", chat(response_format={"type": "yaml"}), "response_format.type", "text"),
    ("stream_options without stream", chat(stream_options={"include_usage": True}), "stream_options", "stream"),
    ("stream_options unknown key", chat(stream=True, stream_options={"include_cost": True}),
     "stream_options.include_cost", "include_cost"),
    ("stream as a string", chat(stream="yes"), "stream", "boolean"),
    ("unknown top-level field", chat(frobnicate=1), "frobnicate", "Unrecognized request argument supplied: frobnicate"),
    ("legacy functions field", chat(functions=[]), "functions", "functions"),
    ("id_slot below -1", chat(id_slot=-2), "id_slot", "-1"),
    ("chat_template_kwargs not an object", chat(chat_template_kwargs=["x"]), "chat_template_kwargs", "dictionary"),
    ("model as a number", chat(model=3), "model", "string"),
]


@pytest.mark.parametrize("body,param,needle", [c[1:] for c in BAD_CHAT], ids=[c[0] for c in BAD_CHAT])
def test_a_bad_chat_request_is_refused_naming_the_field(body, param, needle):
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate(body)
    err = api_error_from_validation(caught.value.errors())
    assert err.status == 400 and err.type == "invalid_request_error"
    assert err.param == param, err.message
    assert needle in err.message, err.message
    # The field is named in the message itself, not only in `param`.
    assert param.split(".")[0] in err.message or "reasoning_budget_tokens" in err.message


BAD_COMPLETION = [
    ("an empty id list in a batch", {"prompt": ["a", []]}, "prompt.1", "prompt 1 is an empty list"),
    ("a bool among token ids", {"prompt": [5, 6, True]}, "prompt.2", "True"),
    ("a float among token ids", {"prompt": [5, 6, 7.5]}, "prompt.2", "integers only"),
    ("a string among a batch's token ids", {"prompt": ["a", [5, "x"]]}, "prompt.1.1", "integers only"),
    ("a number in a batch of strings", {"prompt": ["a", 1]}, "prompt.1", "item 1 is neither"),
    ("best_of under n", {"prompt": "x", "n": 2, "best_of": 1}, "best_of", "at least n (2)"),
    ("best_of 0", {"prompt": "x", "best_of": 0}, "best_of", "at least n"),
    ("a negative token id in a batch", {"prompt": [[1], [5, -1]]}, "prompt.1.1", "token id"),
    ("more prompts than a request holds", {"prompt": ["a"] * 129}, "prompt", "at most 128"),
    ("prompts x n over the choices a request holds", {"prompt": ["a"] * 3, "n": 50}, "prompt", "150 choices"),
    ("a named slot with a batch", {"prompt": ["a", "b"], "id_slot": 0}, "id_slot", "one prompt"),
    ("empty prompt list", {"prompt": []}, "prompt", "empty"),
    ("negative token id", {"prompt": [5, -1]}, "prompt.1", "token id"),
    ("prompt of the wrong type", {"prompt": 5}, "prompt", "string"),
    ("prompt missing", {}, "prompt", "required"),
    ("suffix", {"prompt": "x", "suffix": "y"}, "suffix", "suffix"),
    ("best_of 2", {"prompt": "x", "best_of": 2}, "best_of", "best_of"),
    ("logprobs 6", {"prompt": "x", "logprobs": 6}, "logprobs", "5"),
    ("logprobs as a bool", {"prompt": "x", "logprobs": True}, "logprobs", "integer"),
    ("reasoning budget -2", {"prompt": "x", "reasoning_budget_tokens": -2}, "reasoning_budget_tokens", "but got -2"),
    ("messages on completions", {"prompt": "x", "messages": USER}, "messages", "Unrecognized"),
]


@pytest.mark.parametrize("body,param,needle", [c[1:] for c in BAD_COMPLETION], ids=[c[0] for c in BAD_COMPLETION])
def test_a_bad_completion_request_is_refused_naming_the_field(body, param, needle):
    with pytest.raises(ValidationError) as caught:
        CompletionRequest.model_validate(body)
    err = api_error_from_validation(caught.value.errors())
    assert err.param == param, err.message
    assert needle in err.message, err.message


def test_a_completion_prompt_is_read_as_a_batch_of_strings_or_token_id_lists():
    def prompts(value):
        return CompletionRequest.model_validate({"prompt": value}).prompt

    assert prompts("hi") == ["hi"]
    assert prompts([1, 2]) == [[1, 2]]
    assert prompts(["hi"]) == ["hi"]
    assert prompts([[1, 2]]) == [[1, 2]]
    assert prompts(["a", "b"]) == ["a", "b"]
    assert prompts([[1], [2, 3], "c"]) == [[1], [2, 3], "c"]
    assert CompletionRequest.model_validate({"prompt": ["a", "b"], "id_slot": -1}).id_slot == -1
    # An empty string is left to the tokenizer, which may give it a BOS to continue from.
    assert prompts("") == [""] and prompts(["a", ""]) == ["a", ""]
    # best_of equal to n asks for nothing more than n does.
    assert CompletionRequest.model_validate({"prompt": "x", "n": 2, "best_of": 2}).n == 2


def test_stream_options_accept_the_sdks_obfuscation_flag_and_null_as_the_default():
    opts = {"include_usage": None, "include_obfuscation": False, "continuous_usage_stats": None}
    req = CompletionRequest.model_validate({"prompt": "x", "stream": True, "stream_options": opts})
    assert not req.stream_options.include_usage
    chat = ChatCompletionRequest.model_validate(
        {"messages": USER, "stream": True, "stream_options": {"include_usage": True, "include_obfuscation": True}})
    assert chat.stream_options.include_usage


def test_a_full_agentic_chat_request_is_accepted_and_normalised():
    req = ChatCompletionRequest.model_validate({
        "model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "be"}, {"type": "text", "text": "brief"}]},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "reasoning": "think", "refusal": None, "annotations": [],
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "stop": "END",
        "logit_bias": {"42": -100},
        "thinking_budget_tokens": 0,
        "max_tokens": 10,
        "max_completion_tokens": 20,
        "temperature": 1,
        "timings_per_token": True,
        "samplers": "edkypmxt",
        "metadata": {"k": "v"},
        "store": False,
        "stream": True,
        "stream_options": {"include_usage": True},
    })
    assert req.messages[0].content == "be\nbrief"
    assert req.messages[2].reasoning_content == "think"
    assert req.stop == ["END"]
    assert req.logit_bias == {42: -100.0}
    assert req.reasoning_budget_tokens == 0
    assert req.effective_max_tokens == 20
    assert req.temperature == 1.0
    assert isinstance(req.tool_choice, NamedToolChoice)


def test_tool_call_arguments_stay_the_clients_string_and_parse_for_the_template():
    def assistant(arguments):
        req = ChatCompletionRequest.model_validate(msg(
            role="assistant", tool_calls=[{"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]
        ))
        assert req.messages[0].tool_calls[0].function.arguments == arguments
        return template_messages(req)[0]["tool_calls"][0]["function"]["arguments"]

    assert assistant('{"city": "Paris"}') == {"city": "Paris"}
    assert assistant("[1, 2]") == [1, 2]
    truncated = '{"city": "Par'  # a cut-off call echoed back is not a 400
    assert assistant(truncated) == truncated
    # JSON that Python's own parser refuses is the client's string too.
    for arguments in ('{"n": ' + "9" * 5000 + "}", '{"a": ' + "[" * 5000 + "]" * 5000 + "}"):
        assert assistant(arguments) == arguments


def test_null_for_a_field_whose_type_has_no_null_means_its_default_as_openais_spec_types_it():
    req = ChatCompletionRequest.model_validate(chat(n=None, stream=None, logprobs=None, ignore_eos=None))
    assert (req.n, req.stream, req.logprobs, req.ignore_eos) == (1, False, False, False)
    completion = CompletionRequest.model_validate({"prompt": "hi", "echo": None, "max_tokens": None})
    assert completion.echo is False and completion.max_tokens is None, "null keeps its meaning where it has one"
    with pytest.raises(ValidationError):  # a required field is not defaulted by null
        ChatCompletionRequest.model_validate({"messages": None})


def test_a_null_under_one_name_of_the_thinking_budget_leaves_the_other_to_decide():
    for both in ({"reasoning_budget_tokens": None, "thinking_budget_tokens": 5},
                 {"reasoning_budget_tokens": 5, "thinking_budget_tokens": None}):
        assert ChatCompletionRequest.model_validate(chat(**both)).reasoning_budget_tokens == 5
    with pytest.raises(ValidationError, match="different values"):
        ChatCompletionRequest.model_validate(chat(reasoning_budget_tokens=4, thinking_budget_tokens=5))


def test_max_tokens_alone_is_the_effective_limit_and_absence_leaves_it_to_the_server():
    assert ChatCompletionRequest.model_validate(chat(max_tokens=7)).effective_max_tokens == 7
    assert ChatCompletionRequest.model_validate(chat()).effective_max_tokens is None


def test_a_legacy_completion_without_max_tokens_gets_openais_16_and_null_leaves_it_to_the_server():
    assert CompletionRequest.model_validate({"prompt": "hi"}).max_tokens == 16
    assert CompletionRequest.model_validate({"prompt": "hi", "max_tokens": None}).max_tokens is None
    assert CompletionRequest.model_validate({"prompt": "hi", "max_tokens": 300}).max_tokens == 300


def test_reasoning_budget_admits_exactly_minus_one_to_int32_max():
    for ok in (-1, 0, 2000, 2**31 - 1):
        assert ChatCompletionRequest.model_validate(chat(reasoning_budget_tokens=ok)).reasoning_budget_tokens == ok
    same = ChatCompletionRequest.model_validate(chat(reasoning_budget_tokens=5, thinking_budget_tokens=5))
    assert same.reasoning_budget_tokens == 5


def test_tokenize_and_detokenize_requests_are_strict():
    assert TokenizeRequest.model_validate({"content": "hi", "with_pieces": True}).with_pieces
    with pytest.raises(ValidationError):
        TokenizeRequest.model_validate({"content": 5})
    with pytest.raises(ValidationError):
        DetokenizeRequest.model_validate({"tokens": [1, -3]})


def test_a_response_omits_empty_reasoning_and_keeps_the_null_fields_openai_sends():
    message = ChatCompletionMessage(content="hello", reasoning_content="", tool_calls=[])
    body = ChatCompletion(
        model="m",
        choices=[ChatCompletionChoice(index=0, message=message, finish_reason="stop")],
        usage=Usage.of(prompt_tokens=10, completion_tokens=3, cached_tokens=8),
        timings=Timings.of(cache_n=8, prompt_n=2, prompt_ms=4.0, predicted_n=3, predicted_ms=30.0),
    ).model_dump()
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "hello"}
    assert choice["logprobs"] is None and "logprobs" in choice
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 8}
    assert body["usage"]["total_tokens"] == 13
    assert body["timings"]["predicted_per_second"] == pytest.approx(100.0)
    assert "system_fingerprint" not in body


def test_the_opening_delta_carries_a_null_content_and_later_deltas_only_what_changed():
    first = ChoiceDelta(role="assistant").model_dump()
    assert first == {"role": "assistant", "content": None}
    tool = ChoiceDelta(tool_calls=[DeltaToolCall(index=0, function=DeltaFunction(arguments="{\"a"))]).model_dump()
    assert tool == {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a"}}]}
    chunk = ChatCompletionChunk(id="x", model="m", choices=[ChunkChoice(index=0, delta=ChoiceDelta(content="hi"))])
    dumped = chunk.model_dump()
    assert dumped["choices"][0] == {"index": 0, "delta": {"content": "hi"}, "finish_reason": None, "logprobs": None}
    assert "usage" not in dumped


def test_the_openai_sdk_parses_our_responses_and_chunks():
    from openai.types import Completion as SdkCompletion
    from openai.types.chat import ChatCompletion as SdkChat
    from openai.types.chat import ChatCompletionChunk as SdkChunk

    from server.protocol import Completion, CompletionChoice, ResponseFunction, ToolCall

    message = ChatCompletionMessage(
        content=None,
        reasoning_content="thought",
        tool_calls=[ToolCall(id="call_1", function=ResponseFunction(name="f", arguments="{}"))],
    )
    chat = SdkChat.model_validate(ChatCompletion(
        model="m", choices=[ChatCompletionChoice(index=0, message=message, finish_reason="tool_calls")],
        usage=Usage.of(5, 2, cached_tokens=4),
    ).model_dump())
    assert chat.choices[0].message.tool_calls[0].function.name == "f"
    assert chat.usage.prompt_tokens_details.cached_tokens == 4
    assert chat.choices[0].message.model_extra["reasoning_content"] == "thought"

    chunk = SdkChunk.model_validate(ChatCompletionChunk(id="x", model="m", choices=[ChunkChoice(
        index=0, delta=ChoiceDelta(tool_calls=[DeltaToolCall(
            index=0, id="call_1", type="function", function=DeltaFunction(name="f", arguments=""))]),
    )]).model_dump())
    assert chunk.choices[0].delta.tool_calls[0].id == "call_1"

    completion = SdkCompletion.model_validate(Completion(
        model="m", choices=[CompletionChoice(index=0, text="hi", finish_reason="length")]
    ).model_dump())
    assert completion.choices[0].text == "hi"


def test_a_message_the_sdk_helpers_returned_is_accepted_back_as_it_came():
    from openai.types.chat import ParsedChatCompletionMessage, ParsedFunctionToolCall
    from openai.types.chat.parsed_function_tool_call import ParsedFunction

    parsed = ParsedChatCompletionMessage(role="assistant", content=None, parsed={"ok": True}, tool_calls=[
        ParsedFunctionToolCall(id="c1", type="function",
                               function=ParsedFunction(name="f", arguments='{"a": 1}', parsed_arguments={"a": 1}))])
    streamed = {"role": "assistant", "tool_calls": [  # the stream helper's final message keeps each call's index
        {"index": 0, "id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    for message in (parsed.model_dump(), parsed.model_dump(exclude_none=True), streamed):
        req = ChatCompletionRequest.model_validate(msg(**message))
        assert req.messages[0].tool_calls[0].function.name == "f"


def test_an_assistant_turn_without_answer_text_is_accepted_back_as_the_server_sent_it():
    for message in ({"role": "assistant", "content": None, "reasoning_content": "thinking, cut by max_tokens"},
                    {"role": "assistant", "content": None}):
        req = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}, message]})
        assert template_messages(req)[1]["content"] == ""
