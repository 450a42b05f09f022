"""POST /v1/responses: OpenAI's Responses API over the chat pipeline, whole responses only.

The request becomes the chat request it spells (server/protocol/responses.py),
which renders, constrains and runs exactly as /v1/chat/completions does; the
generation's reading (reasoning, content, calls) becomes output items in the
Responses order: a `reasoning` item (the thought as `reasoning_text`, summary
empty), a `message` with one `output_text`, then one `function_call` per
call. A generation cut by `max_output_tokens` answers `status: "incomplete"`
with `incomplete_details.reason`. Nothing is stored (`store` is accepted and
changes nothing), so the response is not retrievable later.
"""

from __future__ import annotations

import secrets
import time

from fastapi import APIRouter, Request
from pydantic import ValidationError

from server.errors import InvalidRequestError
from server.generation import check_model, collect, submit
from server.output import parse_output
from server.protocol import ChatCompletionRequest
from server.protocol.responses import ResponsesRequest
from server.routes.chat import _parsed_reasoning, _prepare
from server.tokenizer_thread import off_loop

router = APIRouter()


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def _chat_request(req: ResponsesRequest) -> ChatCompletionRequest:
    """The chat request `req` spells. Its own checks passed, so what chat still refuses is about the items
    as a whole (a call output whose call is not in the input, say): the error names `input`."""
    try:
        return ChatCompletionRequest.model_validate(req.to_chat_body())
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        field = (err.get("ctx") or {}).get("field")
        raise InvalidRequestError(f"input does not make a valid conversation: {err['msg']} "
                                  f"(at {where}{'.' + field if field else ''} of the chat it becomes)",
                                  param="input") from None


@router.post("/v1/responses")
async def responses(req: ResponsesRequest, http_request: Request):
    state = http_request.app.state.server
    state.require_ready()
    check_model(req.model, state)
    info = state.info
    chat = _chat_request(req)
    prompt, params = await off_loop(_prepare, chat, state)
    tool_format = (info.family.tool_call_format if info.family else None) if prompt.tools_offered else None
    stream = await submit(state, prompt.token_ids, params)
    [choice] = await collect(stream, http_request, state.engine, 1)
    cut = choice.finish_reason == "length"
    parsed = parse_output(choice.text, _parsed_reasoning(info), tool_format, prompt.reasoning_open, cut=cut)
    calls = parsed.tool_calls[:1] if req.parallel_tool_calls is False else parsed.tool_calls

    output: list[dict] = []
    if parsed.reasoning:
        output.append({"type": "reasoning", "id": _id("rs"), "summary": [],
                       "content": [{"type": "reasoning_text", "text": parsed.reasoning}]})
    if parsed.content:
        output.append({"type": "message", "id": _id("msg"), "role": "assistant",
                       "status": "incomplete" if cut else "completed",
                       "content": [{"type": "output_text", "text": parsed.content, "annotations": [], "logprobs": []}]})
    for call in calls:
        output.append({"type": "function_call", "id": _id("fc"), "call_id": _id("call"), "name": call.name,
                       "arguments": call.arguments, "status": "incomplete" if cut else "completed"})

    stats = choice.stats
    cached = stats.cached_tokens if stats else 0
    produced = len(choice.token_ids)
    return {
        "id": _id("resp"), "object": "response", "created_at": int(time.time()), "model": info.served_model_name,
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None, "instructions": req.instructions, "output": output,
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "tool_choice": _tool_choice(req), "tools": [t.model_dump(exclude_none=True) for t in req.tools or []],
        "temperature": req.temperature, "top_p": req.top_p, "max_output_tokens": req.max_output_tokens,
        "previous_response_id": None, "store": False, "metadata": {},
        "text": {"format": {"type": "text"}} if req.text is None or req.text.format is None
        else {"format": req.text.format.model_dump(by_alias=True, exclude_none=True)},
        "reasoning": {"effort": req.reasoning.effort if req.reasoning else None, "summary": None},
        "usage": {
            "input_tokens": len(prompt.token_ids), "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": produced,
            "output_tokens_details": {"reasoning_tokens": _reasoning_tokens(state, choice.token_ids, parsed)},
            "total_tokens": len(prompt.token_ids) + produced,
        },
    }


def _tool_choice(req: ResponsesRequest):
    if req.tool_choice is None:
        return "auto"
    return req.tool_choice if isinstance(req.tool_choice, str) else req.tool_choice.model_dump()


def _reasoning_tokens(state, token_ids: list[int], parsed) -> int:
    """Generated tokens up to the thought's closing marker (all of them when the thought was cut)."""
    if not parsed.reasoning or state.info.reasoning is None:
        return 0
    end = state.tokenizer.encode(state.info.reasoning.end, add_special_tokens=False)
    for i in range(len(token_ids) - len(end) + 1):
        if token_ids[i:i + len(end)] == end:
            return i + len(end)
    return len(token_ids)
