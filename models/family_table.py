"""Which tool-call opener and reasoning format a model family uses.

Two features read this: anchors (`scheduler/window.py` needs the literal
text that opens a tool call, to find its single token) and the reasoning
budget (`models/reasoning_plan.py` needs the marker pair to force, or to
know that there is none). The data lives in `configs/model_families.toml`
so adding a family is an edit to a table, not to code; this module loads
it into frozen values and validates every key, so a typo fails at startup
with the family named instead of silently disabling a feature.

Reasoning detection prefers the checkpoint's chat template over the
table: a fine-tune can add or remove thinking while keeping its base
`model_type`, and the template is what the model was actually trained to
produce. The table is the fallback for a checkpoint without a template.

Not for: parsing tool calls or reasoning out of text (the parsers own
that), or tokenizing anything -- `anchor_description` is handed the
anchor id the caller resolved.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

# configs/ is a package so the table ships inside wheels and the Docker image.
DEFAULT_TABLE_PATH = Path(str(resources.files("configs") / "model_families.toml"))

ReasoningKind = Literal["markers", "channel"]
_KINDS = ("markers", "channel")
_FORMAT_KEYS = {"kind", "start", "end", "template"}
_FAMILY_KEYS = {"tool_call_opener", "tool_call_format", "reasoning"}


@dataclass(frozen=True)
class ReasoningFormat:
    """How a family marks its chain of thought.

    `markers`: `start` ... `end`, a pair whose closer a sampler can force
    one token at a time. `channel`: a channel grammar (gpt-oss harmony)
    with no such closer; `start`/`end` are None.
    """

    name: str
    start: str | None
    end: str | None
    kind: ReasoningKind


@dataclass(frozen=True)
class FamilyInfo:
    model_type: str
    tool_call_opener: str | None
    tool_call_format: str | None
    reasoning: ReasoningFormat | None


class FamilyTableError(ValueError):
    """The family table is malformed; the message names the entry."""


@dataclass(frozen=True)
class FamilyTable:
    families: dict[str, FamilyInfo]
    reasoning_formats: dict[str, ReasoningFormat]
    # (template marker, format) in file order: the first marker found in a
    # chat template decides.
    template_markers: tuple[tuple[str, ReasoningFormat], ...]

    def family(self, model_type: str) -> FamilyInfo | None:
        return self.families.get(model_type)


def parse_family_table(text: str, source: str = "<string>") -> FamilyTable:
    """Build a table from TOML text; `source` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FamilyTableError(f"{source}: not valid TOML: {exc}") from exc
    unknown = set(data) - {"reasoning_formats", "families"}
    if unknown:
        raise FamilyTableError(f"{source}: unknown top-level keys {sorted(unknown)}")

    formats: dict[str, ReasoningFormat] = {}
    markers: list[tuple[str, ReasoningFormat]] = []
    for name, entry in data.get("reasoning_formats", {}).items():
        where = f"{source}: reasoning_formats.{name}"
        _check_keys(entry, _FORMAT_KEYS, where)
        kind = entry.get("kind")
        if kind not in _KINDS:
            raise FamilyTableError(f"{where}: kind must be one of {_KINDS}, got {kind!r}")
        start, end = _opt_str(entry, "start", where), _opt_str(entry, "end", where)
        if kind == "markers" and not (start and end):
            raise FamilyTableError(f"{where}: a markers format needs both start and end")
        if kind == "channel" and (start or end):
            raise FamilyTableError(f"{where}: a channel format has no start/end pair")
        fmt = ReasoningFormat(name=name, start=start, end=end, kind=kind)
        formats[name] = fmt
        template = _opt_str(entry, "template", where)
        if template:
            markers.append((template, fmt))

    families: dict[str, FamilyInfo] = {}
    for model_type, entry in data.get("families", {}).items():
        where = f"{source}: families.{model_type}"
        _check_keys(entry, _FAMILY_KEYS, where)
        reasoning_name = _opt_str(entry, "reasoning", where)
        if reasoning_name is not None and reasoning_name not in formats:
            raise FamilyTableError(
                f"{where}: reasoning {reasoning_name!r} is not one of the reasoning_formats "
                f"{sorted(formats)}"
            )
        families[model_type] = FamilyInfo(
            model_type=model_type,
            tool_call_opener=_opt_str(entry, "tool_call_opener", where) or None,
            tool_call_format=_opt_str(entry, "tool_call_format", where),
            reasoning=formats[reasoning_name] if reasoning_name is not None else None,
        )
    return FamilyTable(families, formats, tuple(markers))


def load_family_table(path: Path | str | None = None) -> FamilyTable:
    """The shipped table (cached), or the one at `path`."""
    if path is None:
        return _default_table()
    path = Path(path)
    return parse_family_table(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def _default_table() -> FamilyTable:
    return parse_family_table(
        DEFAULT_TABLE_PATH.read_text(encoding="utf-8"), str(DEFAULT_TABLE_PATH)
    )


def detect_reasoning_format(
    model_type: str, chat_template: str | None, table: FamilyTable | None = None
) -> ReasoningFormat | None:
    """The reasoning format a checkpoint uses.

    With a chat template, the template decides: the first format whose
    marker appears in it (`<|channel|>` is harmony, `<|channel>` Gemma 4,
    `<think>` the think pair), or None when it has none of them -- a
    template that never writes a thought has no thought to budget. Without
    a template, the family table's entry for `model_type`.
    """
    table = table or load_family_table()
    if chat_template is not None:
        for marker, fmt in table.template_markers:
            if marker in chat_template:
                return fmt
        return None
    family = table.family(model_type)
    return family.reasoning if family else None


def anchor_description(
    model_type: str, family: FamilyInfo | None, anchor_token: int | None
) -> str:
    """The one startup-log line saying which token is the anchor, or why none is.

    `anchor_token` is what `scheduler.window.resolve_anchor_token` made of
    the family's opener with the served tokenizer.
    """
    if family is None:
        return (
            f"anchors: off -- model_type {model_type!r} is not in the family table "
            f"({DEFAULT_TABLE_PATH.name}), so its tool-call opener is unknown"
        )
    opener = family.tool_call_opener
    if opener is None:
        return f"anchors: off -- the {model_type} family has no tool-call opener token"
    if anchor_token is None:
        return (
            f"anchors: off -- the {model_type} tool-call opener {opener!r} is not a single "
            f"token in this tokenizer"
        )
    return f"anchors: on -- token {anchor_token} ({opener!r}) opens a tool call for {model_type}"


def _check_keys(entry: object, allowed: set[str], where: str) -> None:
    if not isinstance(entry, dict):
        raise FamilyTableError(f"{where}: expected a table, got {type(entry).__name__}")
    unknown = set(entry) - allowed
    if unknown:
        raise FamilyTableError(f"{where}: unknown keys {sorted(unknown)}; allowed {sorted(allowed)}")


def _opt_str(entry: dict, key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise FamilyTableError(f"{where}: {key} must be a string, got {type(value).__name__}")
    return value
