"""One Responses turn's response object, and its storing as the turn goes.

A turn is stored from the moment it is asked (GET answers it, as OpenAI's
does): `queued` (a background turn waiting in the engine's queue) or
`in_progress`, `in_progress` again on its first token, then as it ended --
completed, incomplete, failed, or cancelled when its client left or the
engine aborted it. Each store replaces the one before
(server/responses_store.py). The routes (server/routes/responses.py) and the
background tasks (server/routes/responses_background.py) drive one `Turn`
each; this module only shapes and stores what they tell it.
"""

from __future__ import annotations

import asyncio

from server.errors import APIError
from server.output.responses_events import ResponsesEventWriter
from server.protocol.responses import ResponsesRequest, item_record, new_record_id
from server.responses_replay import EventLog
from server.responses_store import RUNNING, StoredResponse, approximate_size


class Turn:
    """One turn's response object and its storing."""

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
        self.writer = ResponsesEventWriter(req.carried_thought)  # its output items, as far as they got
        self.latest: dict | None = None  # the response object as last stored (or as it would have been)
        self.log: EventLog | None = None  # a streamed background turn's events, for readers resuming its stream

    @property
    def done(self) -> bool:
        """The turn has ended: its last response object carries a final status."""
        return self.latest is not None and self.latest["status"] not in RUNNING

    def envelope(self, status: str, output: list[dict], usage) -> dict:
        return envelope(self.req, self.state.info, self.rid, self.created, status, output, usage, self.stored)

    def begin(self, status: str = "in_progress") -> dict:
        """Store the turn as running (`queued` or `in_progress`), with no output yet."""
        snapshot = self.latest = self.envelope(status, [], None)
        self._store(snapshot, [])
        return snapshot

    def finished(self, status: str, output: list[dict], usage, error: dict | None = None) -> dict:
        response = self.latest = self.envelope(status, output, usage)
        response["error"] = error
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


def envelope(req: ResponsesRequest, info, rid: str, created: int, status: str, output: list[dict], usage,
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
        "background": req.background, "truncation": req.truncation or "disabled",
        # The client's own labels, and the alternatives asked per output-text token (0 when none were).
        "user": req.user, "safety_identifier": req.safety_identifier, "prompt_cache_key": req.prompt_cache_key,
        "top_logprobs": req.top_logprobs or 0,
        "usage": usage,
    }


def _tool_choice(req: ResponsesRequest):
    if req.tool_choice is None:
        return "auto"
    return req.tool_choice if isinstance(req.tool_choice, str) else req.tool_choice.model_dump()
