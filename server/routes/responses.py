"""POST /v1/responses: OpenAI's Responses API over the chat pipeline, whole or streamed.

The request becomes the chat request it spells (server/protocol/responses.py),
which renders, constrains and runs exactly as /v1/chat/completions does; the
generation's reading (reasoning, content, calls, in the order written)
becomes output items: a `reasoning` item (the thought as `reasoning_text`,
summary empty), a `message` with one `output_text`, one `function_call` per
call -- the whole answer built by the stream's own parser and item writer, so
the two agree item for item. Asked to `include` the output text's logprobs, each
text delta carries those of the tokens that wrote it (server/output/text_logprobs.py
pairs them); asked for `reasoning.encrypted_content`, each reasoning item carries
its thought for a stateless client to send back (server/protocol/carried_thought.py).
A conversation over the context is a 400, unless `truncation: "auto"` asks for its
oldest whole turns to be dropped until it fits (server/protocol/responses_truncation.py).
A generation cut by `max_output_tokens` answers `status: "incomplete"`
with `incomplete_details.reason`. A finished turn is stored unless `store` is
false (server/responses_store.py): `GET /v1/responses/{id}` answers it,
`.../input_items` lists the items its prompt was built from, `DELETE` drops it,
and a turn naming it as `previous_response_id` continues its conversation. A stream sends
the Responses events (server/output/responses_events.py), `event:` lines
named, ending with `response.completed` or `response.incomplete` (no
`[DONE]`, as OpenAI sends none); a failure after the first event is an
`error` event. A `background` turn runs on a task of its own
(server/routes/responses_background.py): polled by id, or, with `stream`
too, its events kept in a log (server/responses_replay.py) that the POST
follows and `GET ...?stream=true&starting_after=N` resumes. The turn's
response object and its storing live in server/routes/responses_turn.py.
"""

from __future__ import annotations

import asyncio
import re
import time

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from server import sse
from server.errors import APIError, ExceedContextSizeError, InvalidRequestError, NotFoundError
from server.generation import (body_size, chat_logprobs, check_model, collect, raise_if_failed, streaming_body,
                               submit, thought_token_count)
from server.output import StreamingOutputParser
from server.output.responses_events import ResponsesEventWriter, new_item_id
from server.output.text_logprobs import TextLogprobs
from server.protocol.responses import ResponsesRequest, item_from_record
from server.protocol.responses_truncation import cut_points, first_fitting
from server.responses_replay import EventLog
from server.responses_store import RUNNING, StoredResponse, approximate_size
from server.routes.chat import _parsed_reasoning, _prepare, one_call_only, render_only, tool_format_of
from server.routes.responses_background import check_background, start_background, start_background_stream
from server.routes.responses_turn import Turn
from server.routes.spelled_chat import chat_request, in_client_words
from server.tokenizer_thread import off_loop

router = APIRouter()
CANCEL_WAIT_SECONDS = 10.0  # how long a cancel waits for the turn to store its end before answering


# Chat fields and the Responses fields they come from, for errors the chat pipeline finds: a chat
# message is no input item one for one (instructions add one, a turn's calls share one), so any
# message path names `input`.
_FIELDS = (("messages", "input"), ("response_format.json_schema", "text.format"), ("response_format", "text.format"),
           ("max_completion_tokens", "max_output_tokens"), ("tool_choice.function", "tool_choice"),
           ("reasoning_effort", "reasoning.effort"))


# Chat fields a message may name besides its own param, as Responses spells them (no prose word among them).
_NAMED_IN_MESSAGES = (("response_format.json_schema", "text.format"), ("response_format", "text.format"),
                      ("max_completion_tokens", "max_output_tokens"), ("reasoning_effort", "reasoning.effort"))


def responses_param(chat: str | None) -> str | None:
    """The Responses field a chat request's field came from (`tools.0.function.name` -> `tools.0.name`)."""
    if not chat:
        return chat
    for theirs, ours in _FIELDS:
        if chat == theirs or chat.startswith(theirs + "."):
            return "input" if ours == "input" else ours + chat[len(theirs):]
    match = re.fullmatch(r"tools\.(\d+)\.function(\..+)?", chat)
    if match:
        return f"tools.{match.group(1)}{match.group(2) or ''}"
    return chat


def _in_our_words(message: str) -> str:
    """A chat pipeline message as a Responses client says it: the other fields a check names, too."""
    for chat_field, field in _NAMED_IN_MESSAGES:
        message = message.replace(chat_field, field)
    return message


@router.post("/v1/responses")
async def responses(req: ResponsesRequest, http_request: Request):
    state = http_request.app.state.server
    state.require_ready()
    check_model(req.model, state)
    check_background(state, req)
    info = state.info
    context = _context(state, req)
    history = [item_from_record(r) for r in context]
    unpaired = req.unpaired_call(history)
    if unpaired is not None:  # OpenAI's rule: every call answered, every output answering one
        raise InvalidRequestError(unpaired[1], param=unpaired[0])
    chat = chat_request(req.to_chat_body(history), responses_param, _in_our_words)
    body_bytes = await body_size(http_request)
    try:
        # The stored turns render along with the body: their text decides the tokenizer lane too.
        prompt, params = await off_loop(_prepare_fitted, req, history, chat, state,
                                        text_size=body_bytes + approximate_size(context))
    except APIError as exc:  # found by the chat pipeline: named as the client wrote it, in the message too
        raise in_client_words(exc, responses_param, _in_our_words)
    tool_format = tool_format_of(info, prompt)
    stream = await submit(state, prompt.token_ids, params)
    rid, created = new_item_id("resp"), int(time.time())
    turn = Turn(state, req, context, rid, created, body_bytes)
    if req.stream and req.background:
        return start_background_stream(state, turn, stream.request_id,
                                       _events(state, req, stream, prompt, tool_format, turn, queued=True))
    if req.stream:
        body = _events(state, req, stream, prompt, tool_format, turn)
        return StreamingResponse(streaming_body(state, stream, body), media_type="text/event-stream",
                                 headers=sse.HEADERS)
    if req.background:
        return start_background(state, turn, stream, lambda client, marked: _whole(
            state, req, client, marked, prompt, tool_format, turn))
    turn.begin()
    try:
        return await _whole(state, req, http_request, stream, prompt, tool_format, turn)
    except BaseException as exc:  # a failed generation, the route cancelled, or a fault of ours
        turn.abandoned(exc)
        raise


@router.post("/v1/responses/input_tokens")
async def input_tokens(req: ResponsesRequest, http_request: Request):
    """OpenAI's count (the SDK's `responses.input_tokens.count`): the tokens of the prompt `/v1/responses`
    would render for this turn, a named turn's items included; counted even past the context."""
    state = http_request.app.state.server
    state.require_ready()
    check_model(req.model, state)
    context = _context(state, req)
    history = [item_from_record(r) for r in context]
    chat = chat_request(req.to_chat_body(history), responses_param, _in_our_words)
    try:
        prompt = await off_loop(render_only, chat, state,
                                text_size=await body_size(http_request) + approximate_size(context))
    except APIError as exc:
        raise in_client_words(exc, responses_param, _in_our_words)
    return {"object": "response.input_tokens", "input_tokens": len(prompt.token_ids)}


def _prepare_fitted(req: ResponsesRequest, history: list, chat, state):
    """`_prepare` of the whole conversation (`chat`) or, when it overflows the context and the request
    asks for `truncation: "auto"`, of the fewest turns dropped from its start that make it fit; on the
    tokenizer thread, as each try renders and counts a prompt."""
    try:
        return _prepare(chat, state)
    except ExceedContextSizeError as exc:
        if req.truncation != "auto":
            raise
        refused = [exc]
    prepared: dict[int, tuple] = {}

    def fits(start: int) -> bool:
        try:
            prepared[start] = _prepare(chat_request(req.to_chat_body(history, start), responses_param,
                                                    _in_our_words), state)
            return True
        except ExceedContextSizeError as exc:
            refused.append(exc)
            return False

    start = first_fitting(cut_points(req.all_items(history)), fits)
    if start is not None:
        return prepared[start]
    # The last try kept the fewest items: the last user turn and what follows it (bisection ends there).
    n_prompt, n_ctx = refused[-1].extra["n_prompt_tokens"], refused[-1].extra["n_ctx"]
    raise ExceedContextSizeError(n_prompt, n_ctx, param="input", message=(
        f"the request exceeds the available context size even with truncation 'auto': kept from its last user "
        f"turn on (with the instructions, system messages and tools), its prompt is at least {n_prompt} tokens, "
        f"but this model's maximum context length is {n_ctx} tokens"))


async def _whole(state, req: ResponsesRequest, http_request: Request, stream, prompt, tool_format, turn) -> dict:
    [choice] = await collect(stream, http_request, state.engine, 1)
    # The whole answer is read the way its stream is, by the same parser and item writer: the two agree
    # item for item (order, text, statuses), as a client switching between them expects.
    writer = turn.writer
    parser = StreamingOutputParser(_parsed_reasoning(state.info), tool_format, prompt.reasoning_open)
    texts = TextLogprobs() if req.text_logprobs else None
    for piece, entries in choice.written:
        _write(state, req, writer, texts, parser.feed(piece), piece, entries)
    _write(state, req, writer, texts, parser.finish())
    writer.incomplete = choice.finish_reason == "length"  # the item open at the cut, and the turn
    writer.finish()
    usage = _usage(state, prompt, choice.token_ids, choice.stats, writer, tool_format)
    return turn.finished(_status(writer, choice.finish_reason), writer.items, usage)


def _context(state, req: ResponsesRequest) -> list[dict]:
    """The stored items a turn naming `previous_response_id` continues from (none without it)."""
    if req.previous_response_id is None:
        return []
    entry = state.responses.get(req.previous_response_id)
    if entry is None:
        # OpenAI's status, message and code (a 400: the request names what is not there).
        raise InvalidRequestError(f"Previous response with id '{req.previous_response_id}' not found.",
                                  param="previous_response_id", code="previous_response_not_found")
    if entry.response["status"] in RUNNING:  # its output is not known yet
        raise InvalidRequestError(f"Previous response with id '{req.previous_response_id}' is still in progress; "
                                  "continue from it once it has finished.", param="previous_response_id")
    return entry.next_context()


def _stored(state, rid: str) -> StoredResponse:
    entry = state.responses.get(rid)
    if entry is None:
        raise NotFoundError(f"Response with id '{rid}' not found.", param="response_id")
    return entry


def _response(state, rid: str) -> dict:
    """The response object of `rid`: stored, or a background turn still running that the store's bound
    evicted (its last word stores it again)."""
    entry = state.responses.get(rid)
    if entry is not None:
        return entry.response
    running = state.background.get(rid)
    if running is not None:
        return running.turn.latest
    raise NotFoundError(f"Response with id '{rid}' not found.", param="response_id")


@router.get("/v1/responses/{rid}")
async def get_response(rid: str, http_request: Request, stream: bool = False, starting_after: int | None = None,
                       include_obfuscation: bool | None = None):
    """The response object; with `stream=true`, a streamed background turn's events again, after
    `starting_after` (OpenAI's resume), following the turn live if it still runs. `include_obfuscation` is
    accepted and ignored: this server adds no obfuscation padding to its events."""
    state = http_request.app.state.server
    response = _response(state, rid)
    if not stream:
        return response
    if starting_after is not None and starting_after < 0:
        raise InvalidRequestError(f"starting_after must be a sequence number (0 or more), got {starting_after}",
                                  param="starting_after")
    kept = _event_log(state, rid)
    if kept is None:
        raise InvalidRequestError(f"response '{rid}' was not created with background: true and stream: true; "
                                  "only such a response can be streamed again", param="stream")
    if kept.closed and starting_after is not None and starting_after >= len(kept.events):
        raise InvalidRequestError(f"starting_after {starting_after} is past the stream's last event (sequence "
                                  f"number {len(kept.events) - 1}), and the response has ended", param="starting_after")
    after = -1 if starting_after is None else starting_after
    return StreamingResponse(kept.follow(after), media_type="text/event-stream", headers=sse.HEADERS)


def _event_log(state, rid: str) -> EventLog | None:
    """The events of a streamed background turn: kept with it in the store, or on it while it runs."""
    entry = state.responses.get(rid)
    if entry is not None and entry.events is not None:
        return entry.events
    running = state.background.get(rid)
    return running.turn.log if running is not None else None


@router.delete("/v1/responses/{rid}")
async def delete_response(rid: str, http_request: Request):
    state = http_request.app.state.server
    _response(state, rid)
    state.responses.delete(rid)
    running = state.background.pop(rid, None)
    if running is not None:  # nobody can read it now: it stops (and stays deleted when it ends)
        state.responses.forget_when_done(rid)
        state.engine.abort(running.request_id)
    return {"id": rid, "object": "response", "deleted": True}


@router.post("/v1/responses/{rid}/cancel")
async def cancel_response(rid: str, http_request: Request):
    """Stop a background turn (OpenAI's route): it ends `cancelled`, keeping the output it had; a turn that
    already ended is answered as it is, as OpenAI answers a second cancel."""
    state = http_request.app.state.server
    if not _response(state, rid).get("background"):
        raise InvalidRequestError(f"response '{rid}' was not created with background: true; only background "
                                  "responses can be cancelled", param="response_id")
    running = state.background.get(rid)
    if running is not None:
        state.engine.abort(running.request_id)  # the engine ends it `abort`: the turn is stored as cancelled
        await asyncio.wait({running.task}, timeout=CANCEL_WAIT_SECONDS)
    return _response(state, rid)


@router.get("/v1/responses/{rid}/input_items")
async def input_items(rid: str, http_request: Request, limit: int = 20, order: str = "desc",
                      after: str | None = None):
    """The items the turn's prompt was built from, previous turns' included, newest first by default."""
    if not 1 <= limit <= 100:
        raise InvalidRequestError(f"limit must be between 1 and 100, got {limit}", param="limit")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(f"order must be 'asc' or 'desc', got {order!r}", param="order")
    items = list(_stored(http_request.app.state.server, rid).context)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise InvalidRequestError(f"after names no item of response '{rid}': {after!r}", param="after")
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit}


def _thought(writer: ResponsesEventWriter) -> bool:
    return any(item["type"] == "reasoning" for item in writer.items)


async def _events(state, req: ResponsesRequest, stream, prompt, tool_format, turn: Turn, queued: bool = False):
    """The event stream of one turn: created, in progress, each item's events, then completed (or incomplete).
    A background turn (`queued`) is created `queued`, says so, and is in progress from its first token on."""
    writer = turn.writer
    parser = StreamingOutputParser(_parsed_reasoning(state.info), tool_format, prompt.reasoning_open)
    texts = TextLogprobs() if req.text_logprobs else None
    token_ids: list[int] = []
    try:
        snapshot = turn.begin("queued" if queued else "in_progress")
        yield sse.named_event(writer.event("response.created", response=snapshot))
        yield sse.named_event(writer.event(f"response.{snapshot['status']}", response=snapshot))
        async for ev in stream:
            if queued and ev.token_ids:  # it left the engine's queue (an abort or failure while queued has no token)
                queued = False
                yield sse.named_event(writer.event("response.in_progress", response=turn.begin()))
            raise_if_failed(ev)
            token_ids += ev.token_ids
            deltas = parser.feed(ev.text)
            if ev.finish_reason is not None:
                deltas += parser.finish()
            for out in _write(state, req, writer, texts, deltas, ev.text, ev.logprobs):
                yield sse.named_event(out)
            if ev.finish_reason is not None:
                writer.incomplete = ev.finish_reason == "length"  # the item open at the cut, and the turn
                for out in writer.finish():
                    yield sse.named_event(out)
                status = _status(writer, ev.finish_reason)
                usage = _usage(state, prompt, token_ids, ev.stats, writer, tool_format)
                final = turn.finished(status, writer.items, usage)
                yield sse.named_event(writer.event(f"response.{status}", response=final))
    except APIError as exc:  # headers are gone: the error goes in-band, as an `error` event
        turn.abandoned(exc)
        err = exc.body()["error"]
        yield sse.named_event(writer.event("error", code=err.get("code"), message=err["message"], param=err.get("param")))
    except Exception as exc:  # a fault of ours: stored as failed; the stream wrapper reports it
        turn.abandoned(exc)
        raise
    finally:
        turn.abandoned(None)  # a no-op once finished or failed: otherwise the client left mid-stream
        state.engine.abort(stream.request_id)  # a no-op once finished; frees the pages of a client that left


def _write(state, req: ResponsesRequest, writer: ResponsesEventWriter, texts: TextLogprobs | None, deltas: list,
           piece: str = "", entries: list = ()) -> list[dict]:
    """The events of the deltas the parser made of `piece` (written by the tokens of `entries`); with
    `texts`, each text delta carries its own tokens' logprobs."""
    deltas = one_call_only(req, deltas)
    shares = texts.feed(piece, list(entries), deltas) if texts is not None else [[] for _ in deltas]
    return [out for d, mine in zip(deltas, shares) for out in writer.feed(d, _logprobs(state, mine))]


def _logprobs(state, entries: list) -> list[dict]:
    """Token logprob entries as the Responses API's (chat's): token, logprob, bytes, top_logprobs."""
    return (chat_logprobs(state, entries) or {"content": []})["content"]


def _status(writer: ResponsesEventWriter, finish_reason: str | None) -> str:
    """How a turn that ran to its end ended: cut (incomplete), finished, or cancelled by the engine when
    its client left while it ran."""
    if finish_reason == "abort":
        return "cancelled"
    return "incomplete" if writer.incomplete else "completed"


def _usage(state, prompt, token_ids: list[int], stats, writer: ResponsesEventWriter, tool_format: str | None) -> dict:
    # A thought the prompt opened counts even if empty: it took its closer.
    thought = _thought(writer) or prompt.reasoning_open
    produced = len(token_ids)
    return {
        "input_tokens": len(prompt.token_ids), "input_tokens_details": {"cached_tokens": stats.cached_tokens if stats else 0},
        "output_tokens": produced,
        "output_tokens_details": {"reasoning_tokens": thought_token_count(state, token_ids, thought, tool_format)},
        "total_tokens": len(prompt.token_ids) + produced,
    }
