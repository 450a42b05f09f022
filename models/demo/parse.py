"""Read an assistant turn the demo model generated: reasoning, content, tool calls.

What it is for: the client side of the demo's agent loop (offline
evaluation, tests, README example) -- split generated text into
`reasoning_content`, `content` and hermes-style tool calls, and turn those
back into an OpenAI assistant message.

What it is not for: the server's streaming parser. The server has its own,
incremental one; this is the simple whole-text version used to check the
model, kept here so the demo does not depend on server code.

Why it is shaped so: the text is what follows the generation prompt
`<|im_start|>assistant\\n<think>\\n`, so the thought runs up to `</think>`;
with thinking disabled the prompt already closed it and there is no
`</think>` in the text. A call whose JSON does not parse is kept as
invalid rather than dropped, so an evaluation can count it as wrong.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_CALL = re.compile(r"<tool_call>\n?(.*?)\n?</tool_call>", re.DOTALL)
_END = ("<|im_end|>", "<|endoftext|>")


@dataclass(frozen=True)
class ToolCall:
    name: str | None  # None: the JSON did not parse or had no string "name"
    arguments: dict | None
    raw: str  # the text between the tags, as generated (re-rendered verbatim by the template)

    @property
    def valid(self) -> bool:
        return self.name is not None and self.arguments is not None


@dataclass(frozen=True)
class Turn:
    reasoning: str
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)

    def message(self) -> dict:
        """The OpenAI-style assistant message an agent loop sends back with the next request."""
        msg: dict = {"role": "assistant", "content": self.content, "reasoning_content": self.reasoning}
        if self.tool_calls:
            msg["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {
                "name": c.name, "arguments": _arguments_text(c)}} for i, c in enumerate(self.tool_calls)]
        return msg


def _arguments_text(call: ToolCall) -> str:
    """The arguments exactly as generated (OpenAI sends a JSON string), so re-rendering is token-identical."""
    match = re.match(r'\s*\{\s*"name"\s*:\s*"[^"]*"\s*,\s*"arguments"\s*:\s*(.*)\}\s*$', call.raw, re.DOTALL)
    return match.group(1) if match else json.dumps(call.arguments or {})


def _call(raw: str) -> ToolCall:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        return ToolCall(None, None, raw)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall(None, None, raw)
    args = obj.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = None
    return ToolCall(obj["name"], args if isinstance(args, dict) else None, raw)


def parse_turn(text: str, thinking: bool = True) -> Turn:
    """Parse the generated continuation of a generation prompt (thinking opened or already closed)."""
    for end in _END:
        text = text.split(end)[0]
    reasoning = ""
    if thinking and "</think>" in text:
        reasoning, text = text.split("</think>", 1)
        reasoning = reasoning.strip("\n")
    calls = [_call(m.group(1)) for m in _CALL.finditer(text)]
    # An opener without a closer (generation ran out) is an invalid call, not content.
    tail = _CALL.sub("", text)
    if "<tool_call>" in tail:
        calls.append(ToolCall(None, None, tail.split("<tool_call>", 1)[1]))
        tail = tail.split("<tool_call>", 1)[0]
    return Turn(reasoning, tail.strip("\n").strip(), calls)
