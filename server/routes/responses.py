"""POST /v1/responses: OpenAI's Responses API over the chat pipeline, whole or streamed.

The request becomes the chat request it spells (server/protocol/responses.py),
which renders, constrains and runs exactly as /v1/chat/completions does; the
generation's reading (reasoning, content, calls, in the order written)
becomes output items: a `reasoning` item (the thought as `reasoning_text`,
summary empty), a `message` with one `output_text`, one `function_call` per
call -- the whole answer built by the stream's own parser and item writer, so
the two agree item for item. A generation cut by `max_output_tokens` answers `status: "incomplete"`
with `incomplete_details.reason`. A finished turn is stored unless `store` is
false (server/responses_store.py): `GET /v1/responses/{id}` answers it,
`.../input_items` lists the items its prompt was built from, `DELETE` drops it,
and a turn naming it as `previous_response_id` continues its conversation. A stream sends
the Responses events (server/output/responses_events.py), `event:` lines
named, ending with `response.completed` or `response.incomplete` (no
`[DONE]`, as OpenAI sends none); a failure after the first event is an
`error` event. A `background` turn runs on a task of its own: polled by id,
or, with `stream` too, its events kept in a log (server/responses_replay.py)
that the POST follows and `GET ...?stream=true&starting_after=N` resumes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from server.errors import APIError, InvalidRequestError, NotFoundError, NotSupportedError, field_path
from server.generation import (body_size, check_model, collect, raise_if_failed, streaming_body, submit,
                               thought_token_count)
from server.output import StreamingOutputParser
from server.output.responses_events import ResponsesEventWriter, new_item_id
from server.protocol import ChatCompletionRequest
from server.protocol.responses import InputItem, ResponsesRequest, item_from_record, item_record, new_record_id
from server.responses_replay import EventLog
from server.responses_store import RUNNING, StoredResponse, approximate_size
from server.routes.chat import _parsed_reasoning, _prepare, one_call_only, tool_format_of
from server.tokenizer_thread import off_loop

router = APIRouter()
log = logging.getLogger("anchorage.responses")
CANCEL_WAIT_SECONDS = 10.0  # how long a cancel waits for the turn to store its end before answering


# Chat fields and the Responses fields they come from, for errors the chat pipeline finds: a chat
# message is no input item one for one (instructions add one, a turn's calls share one), so any
# message path names `input`.
_FIELDS = (("messages", "input"), ("response_format.json_schema.schema", "text.format.schema"),
           ("response_format", "text.format"), ("max_completion_tokens", "max_output_tokens"),
           ("tool_choice.function", "tool_choice"), ("reasoning_effort", "reasoning.effort"))


# Chat fields a message may name besides its own param, as Responses spells them (no prose word among them).
_NAMED_IN_MESSAGES = (("response_format.json_schema.schema", "text.format.schema"), ("response_format", "text.format"),
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


def _chat_request(req: ResponsesRequest, history: list[InputItem]) -> ChatCompletionRequest:
    """The chat request `req` spells; what chat refuses is reported on the Responses field it came from."""
    try:
        return ChatCompletionRequest.model_validate(req.to_chat_body(history))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = (err.get("ctx") or {}).get("field")
        path = field_path(("body", *err["loc"], *(str(field).split(".") if field else ())))
        raise InvalidRequestError(err["msg"], param=responses_param(path)) from None


@router.post("/v1/responses")
async def responses(req: ResponsesRequest, http_request: Request):
    state = http_request.app.state.server
    state.require_ready()
    check_model(req.model, state)
    _check_background(state, req)
    info = state.info
    context = _context(state, req)
    chat = _chat_request(req, [item_from_record(r) for r in context])
    body_bytes = await body_size(http_request)
    try:
        # The stored turns render along with the body: their text decides the tokenizer lane too.
        prompt, params = await off_loop(_prepare, chat, state, text_size=body_bytes + approximate_size(context))
    except APIError as exc:  # found by the chat pipeline: named as the client wrote it, in the message too
        theirs = responses_param(exc.param)
        if exc.param and theirs != exc.param:
            exc.message = exc.message.replace(exc.param, theirs)
        for chat_field, field in _NAMED_IN_MESSAGES:  # a check that names another field than its own
            exc.message = exc.message.replace(chat_field, field)
        exc.param = theirs
        raise
    tool_format = tool_format_of(info, prompt)
    stream = await submit(state, prompt.token_ids, params)
    rid, created = new_item_id("resp"), int(time.time())
    turn = _Turn(state, req, context, rid, created, body_bytes)
    if req.stream and req.background:
        return _start_background_stream(state, req, stream, prompt, tool_format, turn)
    if req.stream:
        body = _events(state, req, stream, prompt, tool_format, turn)
        return StreamingResponse(streaming_body(state, stream, body), media_type="text/event-stream", headers=_SSE_HEADERS)
    if req.background:
        return _start_background(state, req, stream, prompt, tool_format, turn)
    turn.begin()
    try:
        return await _whole(state, req, http_request, stream, prompt, tool_format, turn)
    except BaseException as exc:  # a failed generation, the route cancelled, or a fault of ours
        turn.abandoned(exc)
        raise


async def _whole(state, req: ResponsesRequest, http_request: Request, stream, prompt, tool_format, turn) -> dict:
    [choice] = await collect(stream, http_request, state.engine, 1)
    # The whole answer is read the way its stream is, by the same parser and item writer: the two agree
    # item for item (order, text, statuses), as a client switching between them expects.
    writer = turn.writer
    parser = StreamingOutputParser(_parsed_reasoning(state.info), tool_format, prompt.reasoning_open)
    # Fed piece by piece, as the stream is: a call it would have announced and the model then broke stays one.
    read = [delta for piece in choice.pieces or [choice.text] for delta in parser.feed(piece)] + parser.finish()
    for delta in one_call_only(req, read):
        writer.feed(delta)
    writer.incomplete = choice.finish_reason == "length"  # the item open at the cut, and the turn
    writer.finish()
    usage = _usage(state, prompt, choice.token_ids, choice.stats, writer, tool_format)
    return turn.finished(_status(writer, choice.finish_reason), writer.items, usage)


class _Turn:
    """One turn's response object, and its storing: `in_progress` from the moment it runs (GET answers it,
    as OpenAI's does), then as it ended -- completed, incomplete, failed, or cancelled when the client left."""

    def __init__(self, state, req: ResponsesRequest, context: list[dict], rid: str, created: int,
                 body_bytes: int) -> None:
        self.state, self.req, self.rid, self.created = state, req, rid, created
        self.body_bytes = body_bytes  # bounds what the envelope echoes (tools, instructions, text.format)
        self.stored = req.store and state.responses.enabled
        token = rid.removeprefix("resp_")
        own = req.items()
        # This turn's input items get ids derived from the response's (unique, and recognisable in listings).
        self.inputs = [item_record(item, new_record_id(item, f"{token}{i:03d}")) for i, item in enumerate(own)]
        self.context = context
        self.done = False
        self.writer = ResponsesEventWriter()  # its output items, as far as they got
        self.latest: dict | None = None  # the response object as last stored (or as it would have been)
        self.log: EventLog | None = None  # a streamed background turn's events, for readers resuming its stream

    def envelope(self, status: str, output: list[dict], usage) -> dict:
        return _envelope(self.req, self.state.info, self.rid, self.created, status, output, usage, self.stored)

    def begin(self, status: str = "in_progress") -> dict:
        snapshot = self.latest = self.envelope(status, [], None)
        self._store(snapshot, [])
        return snapshot

    def finished(self, status: str, output: list[dict], usage, error: dict | None = None) -> dict:
        response = self.latest = self.envelope(status, output, usage)
        response["error"] = error
        self.done = True
        self._store(response, output)
        return response

    def recharge(self) -> None:
        """Store a running turn again as it is: the store's budget then counts the events its log gathered."""
        if not self.done and self.latest is not None:
            self._store(self.latest, [])

    def abandoned(self, exc: BaseException | None) -> None:
        """The turn stopped before it finished: cancelled when the client left (no exception, or the route
        cancelled), else failed, with the output as far as the client saw it."""
        if self.done:
            return
        output = self.writer.items_so_far()
        if exc is None or isinstance(exc, asyncio.CancelledError | GeneratorExit):
            self.finished("cancelled", output, None)
            return
        if isinstance(exc, APIError):
            err = exc.body()["error"]
            error = {"code": err.get("code") or "server_error", "message": err["message"]}
        else:
            error = {"code": "server_error", "message": "internal error while answering; see server log"}
        self.finished("failed", output, None, error)

    def _store(self, response: dict, output: list[dict]) -> None:
        if self.stored:
            size = self.body_bytes + approximate_size(output)
            if self.log is not None:  # the events so far, and the last one, which echoes the response
                size += self.log.size + (0 if response["status"] in RUNNING else approximate_size(response))
            self.state.responses.put(StoredResponse(response, [*self.context, *self.inputs], size, self.log))


def _check_background(state, req: ResponsesRequest) -> None:
    """A background turn is read back from the store (its stream, too, when it streams)."""
    if not req.background:
        return
    if not req.store:
        raise InvalidRequestError("background mode needs store: true (a background response is read back with "
                                  "GET /v1/responses/{id})", param="background")
    if not state.responses.enabled:
        raise NotSupportedError("background mode needs the response store, and this server runs with it off "
                                "(--responses-store-size 0)", param="background")


class _NobodyLeaves:
    """The client of a background turn: it never hangs up (the turn runs until it ends or is cancelled)."""

    async def is_disconnected(self) -> bool:
        return False


class _MarksRunning:
    """A request's event stream that calls `first()` when its first token comes: the turn left the queue. (An
    abort or a failure while it waits brings an event with no token: it never ran.)"""

    def __init__(self, stream, first) -> None:
        self.request_id, self._stream, self._first = stream.request_id, stream, first

    async def __aiter__(self):
        first = self._first
        async for ev in self._stream:
            if first is not None and ev.token_ids:
                first()
                first = None
            yield ev


def _start_background(state, req: ResponsesRequest, stream, prompt, tool_format, turn: _Turn) -> dict:
    """Store the turn `queued`, answer that, and run it on a task of its own (state.background holds it)."""
    snapshot = turn.begin("queued")
    marked = _MarksRunning(stream, lambda: turn.begin("in_progress"))

    async def run() -> None:
        try:
            await _whole(state, req, _NobodyLeaves(), marked, prompt, tool_format, turn)
        except BaseException as exc:  # noqa: BLE001 -- stored as failed (or cancelled); nobody else hears it
            turn.abandoned(exc)
            if not isinstance(exc, APIError | asyncio.CancelledError):
                log.exception("background response %s failed", turn.rid)
        finally:
            state.engine.abort(stream.request_id)  # a no-op once finished
            state.background.pop(turn.rid, None)

    state.background[turn.rid] = _Running(asyncio.get_running_loop().create_task(run()), stream.request_id, turn)
    return snapshot


def _start_background_stream(state, req: ResponsesRequest, stream, prompt, tool_format,
                             turn: _Turn) -> StreamingResponse:
    """Run the turn's event stream on a task of its own, into the turn's log, and answer with the log followed
    from its start: a client that hangs up stops reading, not the turn (it resumes with GET ?stream=true)."""
    kept = turn.log = EventLog()
    events = _events(state, req, stream, prompt, tool_format, turn, queued=True)

    async def run() -> None:
        why = "the server stopped this response before it ended"  # the task cancelled (the loop closing)
        try:
            async for sse in events:
                kept.append(sse)
                if len(kept.events) % RECHARGE_EVERY == 0:
                    turn.recharge()
        except Exception:  # a fault of ours, stored as failed by _events
            log.exception("background response %s failed", turn.rid)
            why = "internal error while answering; see server log"
        finally:
            await events.aclose()  # a no-op once it ended; else (the task cancelled) it stores the turn's end
            if not kept.events or not kept.events[-1].startswith(_LAST_EVENTS):
                # Its readers hear that it ended, numbered where it enters the log (a fault may have left the
                # writer's count ahead of what was logged).
                kept.append(_sse({"type": "error", "sequence_number": len(kept.events), "code": "server_error",
                                  "message": why, "param": None}))
            kept.close()
            state.background.pop(turn.rid, None)

    state.background[turn.rid] = _Running(asyncio.get_running_loop().create_task(run()), stream.request_id, turn)
    return StreamingResponse(kept.follow(), media_type="text/event-stream", headers=_SSE_HEADERS)


_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# The events a turn's stream ends with, as SSE text begins.
_LAST_EVENTS = tuple(f"event: {kind}\n" for kind in ("response.completed", "response.incomplete", "response.cancelled",
                                                      "response.failed", "error"))
RECHARGE_EVERY = 64  # events: a streamed background turn is stored again this often, so the store's budget counts its log


@dataclass
class _Running:
    """A background turn while it runs (state.background): what cancels it, and what GET answers if the store's
    bound evicted it meanwhile."""
    task: asyncio.Task
    request_id: str
    turn: _Turn


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
    after = -1 if starting_after is None else starting_after
    return StreamingResponse(kept.follow(after), media_type="text/event-stream", headers=_SSE_HEADERS)


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


async def _events(state, req: ResponsesRequest, stream, prompt, tool_format, turn: _Turn, queued: bool = False):
    """The event stream of one turn: created, in progress, each item's events, then completed (or incomplete).
    A background turn (`queued`) is created `queued`, says so, and is in progress from its first token on."""
    writer = turn.writer
    parser = StreamingOutputParser(_parsed_reasoning(state.info), tool_format, prompt.reasoning_open)
    token_ids: list[int] = []
    try:
        snapshot = turn.begin("queued" if queued else "in_progress")
        yield _sse(writer.event("response.created", response=snapshot))
        yield _sse(writer.event(f"response.{snapshot['status']}", response=snapshot))
        async for ev in stream:
            if queued and ev.token_ids:  # it left the engine's queue (an abort or failure while queued has no token)
                queued = False
                yield _sse(writer.event("response.in_progress", response=turn.begin()))
            raise_if_failed(ev)
            token_ids += ev.token_ids
            deltas = parser.feed(ev.text)
            if ev.finish_reason is not None:
                deltas += parser.finish()
            for d in one_call_only(req, deltas):
                for out in writer.feed(d):
                    yield _sse(out)
            if ev.finish_reason is not None:
                writer.incomplete = ev.finish_reason == "length"  # the item open at the cut, and the turn
                for out in writer.finish():
                    yield _sse(out)
                status = _status(writer, ev.finish_reason)
                usage = _usage(state, prompt, token_ids, ev.stats, writer, tool_format)
                final = turn.finished(status, writer.items, usage)
                yield _sse(writer.event(f"response.{status}", response=final))
    except APIError as exc:  # headers are gone: the error goes in-band, as an `error` event
        turn.abandoned(exc)
        err = exc.body()["error"]
        yield _sse(writer.event("error", code=err.get("code"), message=err["message"], param=err.get("param")))
    except Exception as exc:  # a fault of ours: stored as failed; the stream wrapper reports it
        turn.abandoned(exc)
        raise
    finally:
        turn.abandoned(None)  # a no-op once finished or failed: otherwise the client left mid-stream
        state.engine.abort(stream.request_id)  # a no-op once finished; frees the pages of a client that left


def _sse(payload: dict) -> str:
    # OpenAI names each event on an `event:` line as well; there is no [DONE] on this API.
    return f"event: {payload['type']}\ndata: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n\n"


def _envelope(req: ResponsesRequest, info, rid: str, created: int, status: str, output: list[dict], usage,
              stored: bool) -> dict:
    """The response object: its items, status and usage, and the request's settings echoed as OpenAI does."""
    return {
        "id": rid, "object": "response", "created_at": created, "model": info.served_model_name, "status": status,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "error": None, "instructions": req.instructions, "output": output,
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "tool_choice": _tool_choice(req), "tools": [t.model_dump(exclude_none=True) for t in req.tools or []],
        "temperature": req.temperature, "top_p": req.top_p, "max_output_tokens": req.max_output_tokens,
        "previous_response_id": req.previous_response_id, "store": stored, "metadata": req.metadata or {},
        "text": {"format": {"type": "text"}} if req.text is None or req.text.format is None
        else {"format": req.text.format.model_dump(by_alias=True, exclude_none=True)},
        "reasoning": {"effort": req.reasoning.effort if req.reasoning else None, "summary": None},
        "background": req.background,
        "usage": usage,
    }


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


def _tool_choice(req: ResponsesRequest):
    if req.tool_choice is None:
        return "auto"
    return req.tool_choice if isinstance(req.tool_choice, str) else req.tool_choice.model_dump()
