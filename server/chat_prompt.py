"""Render a chat request into the prompt the checkpoint expects.

The checkpoint's own chat template does the rendering (through the tokenizer's
`apply_chat_template`), with the request's tools and `chat_template_kwargs`
(e.g. `enable_thinking`): every family's quirks live in its template, not
here. Tool-call arguments arrive as JSON strings and are handed to the
template parsed when they parse, since templates `tojson` them; a string
that does not parse is passed through unchanged.

The result also says whether the rendered prompt left a thought open
(`...assistant\\n<think>\\n`), which both the reasoning-budget plan and the
output parser need.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from models.reasoning_plan import prompt_opens_reasoning
from server.errors import InvalidRequestError
from server.protocol import ChatCompletionRequest
from server.protocol.common import lone_surrogate_path


@dataclass
class RenderedPrompt:
    text: str
    token_ids: list[int]
    reasoning_open: bool  # the prompt ends inside an open thought
    tools_offered: bool


def _arguments(call) -> Any:
    """The arguments parsed, for templates that `tojson` them; text that does not parse goes through as
    the client's string (a cut-off call echoed back, or JSON past what Python's parser takes: an integer
    of more than 4300 digits, nesting deeper than its stack). So does JSON whose strings escape a lone
    surrogate (`"\\ud800"`): parsed, it is no Unicode text and the tokenizer refuses it; as written, it is."""
    try:
        parsed = json.loads(call.function.arguments)
    except (ValueError, RecursionError):
        return call.function.arguments
    return call.function.arguments if lone_surrogate_path(parsed) is not None else parsed


def template_messages(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    out = []
    for m in req.messages:
        msg: dict[str, Any] = {"role": m.role, "content": m.content if m.content is not None else ""}
        if m.name is not None:
            msg["name"] = m.name
        if m.tool_call_id is not None:
            msg["tool_call_id"] = m.tool_call_id
        if m.reasoning_content:
            msg["reasoning_content"] = m.reasoning_content
        if m.tool_calls:
            msg["tool_calls"] = [
                {"id": tc.id, "type": "function", "function": {"name": tc.function.name, "arguments": _arguments(tc)}}
                for tc in m.tool_calls
            ]
        out.append(msg)
    return out


# apply_chat_template arguments a request may not pass, and why: the server sets them itself, they would change
# what it returns (not text), or -- `chat_template` -- a client's own Jinja would run on the server, a loop in
# it holding the server as long as it runs (vLLM refuses it too unless the operator trusts clients).
RESERVED_TEMPLATE_KWARGS = {
    **dict.fromkeys(("add_generation_prompt", "continue_final_message"), ": it is a field of the request itself"),
    **dict.fromkeys(("messages", "tools", "tokenize", "return_dict", "return_tensors",
                     "return_assistant_tokens_mask", "tokenizer_kwargs", "padding", "truncation", "max_length"), ""),
    "chat_template": ": the server renders with the checkpoint's own chat template",
}


def render_chat(req: ChatCompletionRequest, tokenizer, reasoning,
                before_counting: Callable[[str], None] | None = None) -> RenderedPrompt:
    """The prompt the template makes of `req`, tokenized. `before_counting(text)` may refuse the rendered
    text before the tokenizer reads it (server/prompt_size.py: one surely over the context)."""
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidRequestError(
            "this checkpoint has no chat template, so /v1/chat/completions cannot render messages; "
            "use /v1/completions with a raw prompt", param="messages")
    offer_tools = bool(req.tools) and req.tool_choice != "none"
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if offer_tools else None
    kwargs = dict(req.chat_template_kwargs or {})
    for reserved, why in RESERVED_TEMPLATE_KWARGS.items():
        if reserved in kwargs:
            raise InvalidRequestError(f"chat_template_kwargs may not set {reserved!r}{why}",
                                      param=f"chat_template_kwargs.{reserved}")
    if req.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", req.reasoning_effort)  # an explicit template kwarg wins (vLLM's order)
    try:
        text = tokenizer.apply_chat_template(
            template_messages(req), tools=tools, add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message, tokenize=False, **kwargs
        )
    except Exception as exc:  # jinja raises anything, e.g. raise_exception() in a template
        raise _template_error(req, tokenizer, tools, kwargs, exc) from None
    if before_counting is not None:
        before_counting(text)
    ids = tokenizer.encode(text, add_special_tokens=False)
    opened = False
    if reasoning is not None and reasoning.kind == "markers":
        opened = prompt_opens_reasoning(text, reasoning.start, reasoning.end)
        if req.continue_final_message and not opened:
            # The client's own words open a thought it did not close (`<think>\nFirst,`): the model goes
            # on inside it, and what it adds is reasoning until it closes it.
            prefill = req.messages[-1].content or ""
            at = prefill.rfind(reasoning.start)
            opened = at >= 0 and reasoning.end not in prefill[at:] and text.endswith(prefill[at:])
    return RenderedPrompt(text, ids, opened, offer_tools)


def _template_error(req: ChatCompletionRequest, tokenizer, tools, kwargs: dict, exc: Exception) -> InvalidRequestError:
    """The template's refusal, blamed on `chat_template_kwargs` when the messages render without them
    (`{"namespace": 1}` shadows a Jinja name the template calls), on a tool when the messages render
    without it (parameters nested past the template's recursion, say), else on the messages."""
    own = {"reasoning_effort": req.reasoning_effort} if req.reasoning_effort is not None else {}

    def renders(tools_now, **kwargs) -> bool:
        try:
            tokenizer.apply_chat_template(template_messages(req), tools=tools_now, tokenize=False,
                                          add_generation_prompt=req.add_generation_prompt,
                                          continue_final_message=req.continue_final_message, **kwargs)
        except Exception:  # noqa: BLE001 -- any refusal, as in render_chat
            return False
        return True

    if req.chat_template_kwargs and renders(tools, **own):  # as rendered, less what the client's kwargs added
        return InvalidRequestError(f"the chat template failed with these chat_template_kwargs: {exc}",
                                   param="chat_template_kwargs")
    if tools and renders(None, **kwargs):
        param = _unrenderable_tool(tools, lambda some: renders(some, **kwargs))
        return InvalidRequestError(f"the chat template could not render {param}: {exc}", param=param)
    return InvalidRequestError(f"the chat template could not render messages: {exc}", param="messages")


# How many tools are tried one by one to find which the template cannot render; past that, `tools` is blamed
# whole (each try renders the whole prompt: a refusal must not cost a render per tool of a huge list).
_TOOLS_TRIED_ALONE = 32


def _unrenderable_tool(tools: list[dict], renders: Callable[[list[dict]], bool]) -> str:
    """The field of the first tool the template fails on alone (its `function.parameters` when the tool renders
    without them), or `tools` when none fails alone or there are too many to try."""
    for i, tool in enumerate(tools[:_TOOLS_TRIED_ALONE]):
        if renders([tool]):
            continue
        function = tool.get("function")
        if isinstance(function, dict) and "parameters" in function:
            bare = {**tool, "function": {k: v for k, v in function.items() if k != "parameters"}}
            if renders([bare]):
                return f"tools.{i}.function.parameters"
        return f"tools.{i}"
    return "tools"
