"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the chat pipeline.

The request becomes the chat request it spells (server/protocol/messages.py),
which renders, constrains and runs exactly as /v1/chat/completions does; the
generation's reading (reasoning, content, calls, in the order written)
becomes content blocks -- `thinking`, `text`, `tool_use` -- built by the
stream's own parser and block writer whether the answer is whole or
streamed, so the two agree block for block. A forced call (`any`, `tool`)
answers no text: what text there is is a call cut before its name was out.

`stop_reason` is `tool_use` when the turn ends with finished calls,
`max_tokens` when cut (`model_context_window_exceeded` when the context
filled up first), `stop_sequence` (with `stop_sequence`) when one of
the client's stop sequences ended it, else `end_turn`. Usage is Anthropic's:
`input_tokens` are the prompt tokens the prefix cache did not hold, and
`cache_read_input_tokens` those it did (this server caches every prefix by
itself; nothing is ever "created" by a request's cache hint). A stream sends
`message_start` (held for the first token, so its usage already splits the
prompt by the cache), the blocks' events, `message_delta` (stop reason and
final usage) and `message_stop`, each on a named `event:` line; a failure after the
first event is an `error` event. Errors before it are Anthropic-shaped
(server/errors.py renders them so on these paths).
"""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from models.reasoning_plan import unsupported_reason
from server import sse
from server.errors import APIError
from server.generation import body_size, check_model, collect, raise_if_failed, streaming_body, submit
from server.output import ContentDelta, StreamingOutputParser
from server.output.call_json import arguments_complete
from server.output.messages_events import MessagesEventWriter, new_id
from server.protocol import ChatCompletionRequest, NamedToolChoice
from server.protocol.messages import CountTokensRequest, MessagesBody, MessagesRequest, messages_param
from server.routes.chat import _parsed_reasoning, _prepare, one_call_only, render_only, tool_format_of
from server.routes.spelled_chat import chat_request, in_client_words, read_whole
from server.tokenizer_thread import off_loop

router = APIRouter()


async def _prepared(req: MessagesBody, http_request: Request, prepare=_prepare):
    """The turn's prompt and engine parameters (what `prepare` gives), a chat pipeline error named as the
    client wrote the field."""
    state = http_request.app.state.server
    state.require_ready()
    check_model(req.model, state)
    body = req.to_chat_body()
    thinking = getattr(req, "thinking", None)
    if thinking is not None and thinking.type == "disabled" and unsupported_reason(state.info.reasoning):
        # A thought that is a channel grammar (harmony) cannot be cut at 0 tokens. `disabled`, always a valid
        # value in Anthropic's API, is then read as llama.cpp reads it: not at all, the model thinks as usual.
        body.pop("reasoning_budget_tokens", None)
    chat = chat_request(body, messages_param, _in_our_words)
    try:
        return state, chat, await off_loop(prepare, chat, state, text_size=await body_size(http_request))
    except APIError as exc:
        raise in_client_words(exc, messages_param, _in_our_words)


_REQUIRED = re.compile(r"tool_choice '?required'?")


def _in_our_words(message: str) -> str:
    """A chat pipeline message as a Messages client says it: chat's `required` is `{"type": "any"}` here, and
    chat's "no budget" (-1) is thinking `adaptive` (the server's default) or no `thinking` at all."""
    message = message.replace("or send -1.", 'or send thinking {"type": "adaptive"}.')
    return _REQUIRED.sub('tool_choice {"type": "any"}', message)


def _read(chat: ChatCompletionRequest, deltas: list) -> list:
    """The deltas a turn answers: one call when parallel calls are off; under a forced call, no text -- the
    grammar writes the call from the first token, so text is a call cut before its name was out (its raw
    markup), and Anthropic's API answers a forced turn with calls only."""
    deltas = one_call_only(chat, deltas)
    if chat.tool_choice == "required" or isinstance(chat.tool_choice, NamedToolChoice):
        deltas = [d for d in deltas if not isinstance(d, ContentDelta)]
    return deltas


@router.post("/v1/messages")
async def messages(req: MessagesRequest, http_request: Request):
    state, chat, (prompt, params) = await _prepared(req, http_request)
    tool_format = tool_format_of(state.info, prompt)
    stream = await submit(state, prompt.token_ids, params, None, http_request)
    if req.stream:
        body = _events(state, req, chat, stream, prompt, tool_format)
        return StreamingResponse(streaming_body(state, stream, body), media_type="text/event-stream",
                                 headers=sse.HEADERS)
    [choice] = await collect(stream, http_request, state.engine, 1)
    writer = MessagesEventWriter(req.thinking_omitted)
    parser = StreamingOutputParser(_parsed_reasoning(state.info), tool_format, prompt.reasoning_open)
    for delta in _read(chat, read_whole(parser, choice)):
        writer.feed(delta)
    writer.finish()
    message = _envelope(state, new_id("msg"), writer.content())
    message["stop_reason"], message["stop_sequence"] = _stop(choice.finish_reason, choice.stop_string, writer,
                                                             len(choice.token_ids) < req.max_tokens)
    message["usage"] = _usage(len(prompt.token_ids), choice.stats.cached_tokens if choice.stats else 0,
                              len(choice.token_ids))
    return message


@router.post("/v1/messages/count_tokens")
async def count_tokens(req: CountTokensRequest, http_request: Request):
    """The prompt's length in tokens, as `/v1/messages` would render it (Anthropic's route): counted even when
    it is longer than the context, since counting is how a client learns how much to cut."""
    _, _, prompt = await _prepared(req, http_request, render_only)
    return {"input_tokens": len(prompt.token_ids)}


def _envelope(state, mid: str, content: list[dict]) -> dict:
    return {"id": mid, "type": "message", "role": "assistant", "model": state.info.served_model_name,
            "content": content, "stop_reason": None, "stop_sequence": None}


def _usage(prompt_tokens: int, cached: int, output_tokens: int) -> dict:
    return {"input_tokens": prompt_tokens - cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "output_tokens": output_tokens}


def _stop(engine_reason: str | None, stop_string: str | None, writer: MessagesEventWriter,
          short_of_max: bool) -> tuple[str, str | None]:
    """Anthropic's stop_reason (and stop_sequence) for how the engine ended the turn; a cut that came before
    `max_tokens` was the context filling up."""
    if engine_reason == "length":
        return ("model_context_window_exceeded" if short_of_max else "max_tokens"), None
    calls = writer.calls
    # Finished calls are what the turn was for, even when a stop sequence then hit (in their markup, or
    # after them); a call left unfinished is no call a client may run.
    if calls and all(map(arguments_complete, calls)):
        return "tool_use", None
    if stop_string is not None:
        return "stop_sequence", stop_string
    return "end_turn", None


async def _events(state, req: MessagesRequest, chat: ChatCompletionRequest, stream, prompt, tool_format):
    """The event stream of one turn: message_start, each block's events, message_delta, message_stop."""
    writer = MessagesEventWriter(req.thinking_omitted)
    parser = StreamingOutputParser(_parsed_reasoning(state.info), tool_format, prompt.reasoning_open)
    produced, started = 0, False
    try:
        async for ev in stream:
            raise_if_failed(ev)
            if not started:  # opened on the first token, when the prefix cache's share of the prompt is known
                cached = ev.stats.cached_tokens if ev.stats else (ev.cached_tokens or 0)
                start = _envelope(state, new_id("msg"), [])
                start["usage"] = _usage(len(prompt.token_ids), cached, 0)
                yield sse.named_event({"type": "message_start", "message": start})
                started = True
            produced += len(ev.token_ids)
            deltas = parser.feed(ev.text)
            if ev.finish_reason is not None:
                deltas += parser.finish()
            for event in (e for d in _read(chat, deltas) for e in writer.feed(d)):
                yield sse.named_event(event)
            if ev.finish_reason is not None:
                for event in writer.finish():
                    yield sse.named_event(event)
                reason, sequence = _stop(ev.finish_reason, ev.stop_string, writer, produced < req.max_tokens)
                cached = ev.stats.cached_tokens if ev.stats else 0
                yield sse.named_event({"type": "message_delta",
                                       "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                       "usage": _usage(len(prompt.token_ids), cached, produced)})
                yield sse.named_event({"type": "message_stop"})
    except APIError as exc:  # headers are gone: the error goes in-band, as Anthropic's `error` event
        yield sse.named_event(exc.anthropic_body())
    finally:
        state.engine.abort(stream.request_id)  # a no-op once finished; frees the pages of a client that left

