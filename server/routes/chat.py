"""POST /v1/chat/completions: render, validate, generate, parse, answer or stream.

The flow is the design's: the request is already validated (pydantic); the
checkpoint's template renders it; `to_sampling_params` is the one seam to
engine types; the engine streams tokens back; the family's parsers split
reasoning from content and read tool calls. Whole responses and streams are
built from the same parse, so they agree (the parser module tests that).
A streaming client that disconnects aborts its request (Starlette cancels
the body iterator; `finally` tells the engine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from server.chat_prompt import render_chat
from server.engine_params import refuse_invalid_tool_parameters, to_sampling_params
from server.errors import APIError
from server.generation import (
    body_size,
    streaming_body,
    chat_logprobs,
    check_model,
    continuous_usage,
    collect,
    raise_if_failed,
    submit,
    stop_reason_of,
    thought_token_count,
    timings_of,
    usage_of,
    prompt_logprobs_of,
)
from server.output import ReasoningDelta, StreamingOutputParser, ToolCallDelta, delta_dict, parse_output
from server.output.call_json import arguments_complete
from server.protocol import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionRequest,
    ChunkChoice,
    NamedToolChoice,
    Usage,
    new_chat_id,
)
from server.prompt_size import refuse_surely_too_long
from server.sse import DONE, HEADERS, event
from server.tokenizer_thread import off_loop

router = APIRouter()


def one_call_only(req, deltas: list) -> list:
    """The deltas a turn sends: with parallel_tool_calls false, one call was asked for and later ones go."""
    if req.parallel_tool_calls is False:
        return [d for d in deltas if not (isinstance(d, ToolCallDelta) and d.index > 0)]
    return deltas


def render_only(chat: ChatCompletionRequest, state):
    """The prompt `chat` renders to, its tool schemas checked as a generation checks them; not run, and not
    held to the context (for the routes that count a prompt: counting is how a client learns how much to cut)."""
    refuse_invalid_tool_parameters(chat)
    return render_chat(chat, state.tokenizer, state.info.reasoning)


def tool_format_of(info, prompt):
    """The tool-call format the output parser reads calls in: the family's, when the prompt offered tools."""
    return (info.family.tool_call_format if info.family else None) if prompt.tools_offered else None


def _parsed_reasoning(info, req=None):
    """The reasoning format the output parsers can split on: a marker pair, or None (also when the request
    asks llama.cpp's `reasoning_format: "none"`: the thought stays in the content as written).

    A channel grammar (gpt-oss harmony) has no marker-pair parser; its text
    is passed through as content rather than failing the request.
    """
    fmt = info.reasoning
    if getattr(req, "reasoning_format", None) == "none":
        return None
    return fmt if fmt is not None and fmt.kind == "markers" else None


def _finish_reason(engine_reason: str | None, arguments: list[str], req: ChatCompletionRequest) -> str | None:
    # A call the client named is what it asked for, not the model's choice to call: OpenAI answers "stop"
    # then, and "tool_calls" for calls under `auto` or `required` (vLLM follows it). `arguments`: the
    # turn's calls' -- one left unfinished (cut by the client's stop, or ended by the model inside it with
    # no grammar holding it) is no call an agent may run: "stop", as vLLM answers when a call's JSON does
    # not parse.
    if (engine_reason == "stop" and arguments and all(map(arguments_complete, arguments))
            and not isinstance(req.tool_choice, NamedToolChoice)):
        return "tool_calls"
    return engine_reason if engine_reason in ("stop", "length") else "stop"


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, http_request: Request):
    state = http_request.app.state.server
    state.require_ready()
    check_model(req.model, state)
    info = state.info
    prompt, params = await off_loop(_prepare, req, state, text_size=await body_size(http_request))
    tool_format = tool_format_of(info, prompt)
    stream = await submit(state, prompt.token_ids, params, req.id_slot, http_request)
    if req.stream:
        return StreamingResponse(
            streaming_body(state, stream, _stream(state, req, stream, prompt, tool_format)),
            media_type="text/event-stream",
            headers=HEADERS,
        )
    choices = await collect(stream, http_request, state.engine, req.n)
    out = []
    thought = 0  # reasoning tokens of all the choices, as completion_tokens counts all of theirs
    for c in choices:
        # Read as its stream reads it, however it ended: a call left open at the end -- cut by max_tokens or
        # a stop, or (with no grammar holding it) ended by the model -- is the same partial call either way.
        parsed = parse_output(c.text, _parsed_reasoning(info, req), tool_format, prompt.reasoning_open, cut=True,
                              pieces=c.pieces)
        if req.parallel_tool_calls is False and len(parsed.tool_calls) > 1:
            # One call was asked for; later ones are dropped, not turned into content.
            parsed = type(parsed)(parsed.reasoning, parsed.content, parsed.tool_calls[:1])
        thinks = bool(parsed.reasoning) or prompt.reasoning_open  # an empty thought the prompt opened took its closer
        thought += thought_token_count(state, c.token_ids, thinks, tool_format)
        msg = ChatCompletionMessage(
            # None when the model wrote no answer text (only calls, only a thought): what a stream of the same
            # turn reassembles to, since it never sends a content delta then -- and what vLLM answers.
            content=parsed.content or None,
            reasoning_content=parsed.reasoning or None,
            tool_calls=parsed.tool_calls_payload() or None,
        )
        out.append(ChatCompletionChoice(
            index=c.index, message=msg,
            finish_reason=_finish_reason(c.finish_reason, [call.arguments for call in parsed.tool_calls], req),
            stop_reason=stop_reason_of(c, req, state.engine.eos_ids),
            logprobs=chat_logprobs(state, c.logprobs) if req.logprobs else None,
            token_ids=c.token_ids if req.return_token_ids else None,
        ))
    scored = None
    if req.prompt_logprobs is not None:  # a piece per token and alternative: on a tokenizer thread
        scored = await off_loop(prompt_logprobs_of, state, prompt.token_ids, choices[0].prompt_logprobs,
                                req.prompt_logprobs)
    return ChatCompletion(
        model=info.served_model_name, choices=out,
        usage=usage_of(len(prompt.token_ids), choices, _reasoning_tokens(info, thought)),
        timings=timings_of(choices[0].stats),
        prompt_token_ids=prompt.token_ids if req.return_token_ids else None,
        prompt_logprobs=scored,
    ).model_dump(mode="json")


def _reasoning_tokens(info, counted: int) -> int | None:
    """`completion_tokens_details.reasoning_tokens`: given by a model that can think, as OpenAI's reasoning
    models give it (0 for a turn without a thought); left out for one that cannot."""
    return None if info.reasoning is None else counted


def _prepare(req: ChatCompletionRequest, state):
    """The prompt and the engine's parameters: every tokenizer call a request makes, on the tokenizer thread
    (and the tools' schema check, as slow for a schema of megabytes)."""
    refuse_invalid_tool_parameters(req)
    info = state.info
    prompt = render_chat(req, state.tokenizer, info.reasoning, lambda text: refuse_surely_too_long(
        text, info.longest_piece_bytes, info.max_model_len, "messages"))
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    return prompt, to_sampling_params(req, state, prompt.text, prompt.token_ids, logprobs=logprobs,
                                      reasoning_open=prompt.reasoning_open, prompt_logprobs=req.prompt_logprobs)


async def _stream(state, req: ChatCompletionRequest, stream, prompt, tool_format):
    info = state.info
    # One id and one timestamp for every chunk of the stream (OpenAI: "each chunk has the same timestamp").
    cid, model, created = new_chat_id(), info.served_model_name, int(time.time())
    parsers = [StreamingOutputParser(_parsed_reasoning(info, req), tool_format, prompt.reasoning_open)
               for _ in range(req.n)]
    stats0 = None
    continuous = continuous_usage(req)
    by_choice = [0] * req.n  # completion tokens so far per choice (a chunk's running usage is its choice's, as vLLM's)
    thoughts = [_ThoughtCounter(tool_format, prompt.reasoning_open) for _ in range(req.n)]
    arguments: list[dict[int, str]] = [{} for _ in range(req.n)]  # per choice: each call's arguments so far
    tokens_held = [_HeldTokens() for _ in range(req.n)]  # per choice: tokens whose text no chunk carried yet

    def chunk(index, delta, finish=None, logprobs=None, token_ids=None, stop_reason=None, **extra):
        if continuous:
            extra["usage"] = Usage.running(len(prompt.token_ids), by_choice[index])
        return event(ChatCompletionChunk(id=cid, created=created, model=model, choices=[ChunkChoice(
            index=index, delta=delta, finish_reason=finish, logprobs=logprobs, token_ids=token_ids,
            stop_reason=stop_reason)], **extra))

    try:
        for i in range(req.n):
            yield chunk(i, {"role": "assistant", "content": None},
                        **({"prompt_token_ids": prompt.token_ids} if req.return_token_ids and i == 0 else {}))
        async for ev in stream:
            raise_if_failed(ev)
            by_choice[ev.index] += len(ev.token_ids)
            parser = parsers[ev.index]
            deltas = parser.feed(ev.text)
            if ev.finish_reason is not None:
                deltas += parser.finish()
            deltas = one_call_only(req, deltas)
            thoughts[ev.index].feed(state, ev, deltas)
            # A token whose text the parser holds back (a space that may precede a call) goes out with the
            # chunk that carries its text, so each chunk's logprobs and token ids are of its own delta.
            held = tokens_held[ev.index]
            held.entries += ev.logprobs or []
            held.ids += ev.token_ids
            if not deltas and ev.finish_reason is None:
                continue
            lp = chat_logprobs(state, held.entries) if req.logprobs else None
            ids = held.ids if req.return_token_ids else None
            tokens_held[ev.index] = _HeldTokens()
            for d in deltas:
                if isinstance(d, ToolCallDelta):
                    arguments[ev.index][d.index] = arguments[ev.index].get(d.index, "") + (d.arguments or "")
            for d in deltas:
                yield chunk(ev.index, delta_dict(d), logprobs=lp, token_ids=ids)
                lp, ids = None, None
            if ev.finish_reason is not None:
                if ev.index == 0:
                    stats0 = ev.stats
                reason = _finish_reason(ev.finish_reason, list(arguments[ev.index].values()), req)
                yield chunk(ev.index, {}, finish=reason, logprobs=lp, token_ids=ids,
                            stop_reason=stop_reason_of(ev, req, state.engine.eos_ids), timings=timings_of(ev.stats))
        if req.stream_options and req.stream_options.include_usage:
            cached = stats0.cached_tokens if stats0 else 0
            usage = Usage.of(len(prompt.token_ids), sum(by_choice), cached, _reasoning_tokens(info, sum(t.count for t in thoughts)))
            yield event(ChatCompletionChunk(id=cid, created=created, model=model, choices=[], usage=usage))
        yield DONE
    except APIError as exc:  # headers are gone: report in-band, as llama.cpp does
        yield event(exc.body())
        yield DONE  # and end the stream as every stream ends, as vLLM does
    finally:
        # Normal end: the request is already finished and this is a no-op.
        # Client gone (the iterator is cancelled): the engine frees its pages.
        state.engine.abort(stream.request_id)


@dataclass
class _HeldTokens:
    """A streamed choice's tokens since its last chunk: their logprob entries and ids."""
    entries: list = field(default_factory=list)
    ids: list[int] = field(default_factory=list)


class _ThoughtCounter:
    """A streamed choice's reasoning tokens. Its tokens are kept only while its thought may still be open
    (a long answer holds no list); they are counted at its first answer delta, or at its end."""

    def __init__(self, tool_format: str | None, reasoning_open: bool) -> None:
        self.tool_format = tool_format
        self.held: list[int] | None = []
        self.thought = reasoning_open  # the prompt opened the thought: even an empty one took its closer
        self.count = 0

    def feed(self, state, ev, deltas: list) -> None:
        if self.held is None:
            return
        self.held.extend(ev.token_ids)
        self.thought = self.thought or any(isinstance(d, ReasoningDelta) for d in deltas)
        if ev.finish_reason is not None or any(not isinstance(d, ReasoningDelta) for d in deltas):
            self.count = thought_token_count(state, self.held, self.thought, self.tool_format)
            self.held = None
