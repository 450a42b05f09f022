"""Separating a model's chain of thought from its answer.

For a marker pair (`<think>` ... `</think>`; Gemma 4's `<|channel>thought`
... `<channel|>`), in whole text (`split_reasoning`) and as it streams
(`ReasoningStream`), with identical results:

- The thought opens only at the very start of the output (after
  whitespace), or before it when `prompt_opened` says the rendered prompt
  already ends inside an open block (`...assistant\\n<think>\\n`, Qwen3 and
  DeepSeek R1 templates). A `<think>` later in the answer is content.
- The thought ends at the closer, or at a tool-call opener met first
  (llama.cpp's rule: a model may call a tool from inside an unclosed
  thought; the opener then belongs to the content, where the tool parser
  finds it). With neither (the output was cut by `max_tokens`), all of it is
  thought.
- Markers are removed; the thought is stripped of surrounding whitespace
  (the newline after `<think>` and before `</think>`), and the content
  after the closer of its leading whitespace (the `\\n\\n` after
  `</think>`) -- llama.cpp's convention.
- With no markers configured everything is content, untouched.

The stream holds back text that might be the start of a marker and
whitespace that might be the thought's last, so no marker text and no
stray whitespace ever reaches the client.

Not for: budgets (models/reasoning_budget.py) or channel grammars (gpt-oss
harmony has no marker pair; `resolve_markers` refuses it by name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.output.tool_calls import ContentDelta, ReasoningDelta, find_first, partial_suffix


@dataclass(frozen=True)
class ReasoningMarkers:
    start: str
    end: str


THINK = ReasoningMarkers("<think>", "</think>")


def resolve_markers(fmt: Any) -> ReasoningMarkers | None:
    """Markers from None, a ReasoningMarkers, a family-table format or its name."""
    if fmt is None or isinstance(fmt, ReasoningMarkers):
        return fmt
    if isinstance(fmt, str):
        from models.family_table import load_family_table

        formats = load_family_table().reasoning_formats
        if fmt not in formats:
            raise KeyError(f"no reasoning format named {fmt!r}; known: {sorted(formats)}")
        fmt = formats[fmt]
    if getattr(fmt, "kind", "markers") != "markers" or not (fmt.start and fmt.end):
        raise ValueError(
            f"the {getattr(fmt, 'name', fmt)} reasoning format is a channel grammar, "
            "not a marker pair; it has no parser here"
        )
    return ReasoningMarkers(fmt.start, fmt.end)


def split_reasoning(
    text: str,
    markers: ReasoningMarkers | None,
    prompt_opened: bool = False,
    tool_openers: tuple[str, ...] = (),
) -> tuple[str, str]:
    """(reasoning, content) of a whole output; see the module docstring."""
    if markers is None:
        return "", text
    if prompt_opened:
        body = text
    else:
        lead = text.lstrip()
        if not lead.startswith(markers.start):
            return "", text
        body = lead[len(markers.start):]
    hit = find_first(body, (markers.end, *tool_openers))
    if hit is None:
        return body.strip(), ""
    at, marker = hit
    if marker != markers.end:  # a tool call ends the thought and is content
        return body[:at].strip(), body[at:]
    return body[:at].strip(), body[at + len(marker):].lstrip()


class ReasoningStream:
    """The streaming counterpart of `split_reasoning`."""

    def __init__(
        self,
        markers: ReasoningMarkers | None,
        prompt_opened: bool = False,
        tool_openers: tuple[str, ...] = (),
    ) -> None:
        self._markers = markers
        self._ends = (markers.end, *tool_openers) if markers else ()
        # start -> (opener seen) lead -> thought -> (closer) after -> content
        if markers is None:
            self._state = "content"
        else:
            self._state = "lead" if prompt_opened else "start"
        self._buf = ""

    @property
    def in_reasoning(self) -> bool:
        return self._state in ("lead", "thought")

    def feed(self, text: str) -> list[ReasoningDelta | ContentDelta]:
        self._buf += text
        return self._run(final=False)

    def finish(self) -> list[ReasoningDelta | ContentDelta]:
        return self._run(final=True)

    def _run(self, final: bool) -> list[ReasoningDelta | ContentDelta]:
        out: list[ReasoningDelta | ContentDelta] = []
        while self._step(final, out):
            pass
        return out

    def _step(self, final: bool, out: list[ReasoningDelta | ContentDelta]) -> bool:
        """Advance once; True when the state changed and another step may help."""
        state, buf = self._state, self._buf
        if state == "content":
            if buf:
                out.append(ContentDelta(buf))
                self._buf = ""
            return False
        if state in ("lead", "after"):
            self._buf = buf.lstrip()
            if not self._buf:
                return False
            self._state = "thought" if state == "lead" else "content"
            return True
        if state == "start":
            assert self._markers is not None
            lead = buf.lstrip()
            if lead.startswith(self._markers.start):
                self._buf = lead[len(self._markers.start):]
                self._state = "lead"
                return True
            if (not lead or self._markers.start.startswith(lead)) and not final:
                return False  # maybe the opener, still arriving
            self._state = "content"
            return True
        # thought
        hit = find_first(buf, self._ends)
        if hit is not None:
            at, marker = hit
            self._reason(buf[:at].rstrip(), out)
            if marker == self._ends[0]:
                self._buf, self._state = buf[at + len(marker):], "after"
            else:
                self._buf, self._state = buf[at:], "content"
            return True
        if final:
            self._reason(buf.rstrip(), out)
            self._buf = ""
            return False
        safe = len(buf) - partial_suffix(buf, self._ends)
        upto = len(buf[:safe].rstrip())  # trailing whitespace may precede the closer
        self._reason(buf[:upto], out)
        self._buf = buf[upto:]
        return False

    @staticmethod
    def _reason(text: str, out: list[ReasoningDelta | ContentDelta]) -> None:
        if text:
            out.append(ReasoningDelta(text))
