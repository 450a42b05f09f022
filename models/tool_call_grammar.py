"""Schema-constrained tool calls: once the model opens a call, the call must fit one of the offered tools.

What it is for: llama.cpp's lazy tool-call grammar. While the model writes
freely (a thought, prose) nothing is constrained; the call opener token
(`<tool_call>` for Hermes templates, the same single token the window
anchors on) arms the grammar, and from there every token must keep the text
a prefix of

    \\n{"name": <an offered tool>, "arguments": <an object of that tool's parameters schema>}\\n</tool_call>

The closer disarms it; the next opener (a parallel call) arms it again. A
small model's call then always parses, names a tool the client offered, and
has the arguments the schema requires, with the types and enums it gives.
What the values say (which city, which number) stays the model's.

Why it is shaped so: llguidance (the grammar engine llama.cpp and vLLM can
use) derives the token mask from the tokenizer's own byte pieces, so any
tokenization of valid text passes and nothing else does. The grammar is a
string carried by the frozen `SamplingParams` (choices of one request share
it), compiled once (models/grammar_vocabulary.py); each call gets a fresh copy
at its opener. A token the matcher refuses can only be one another processor
forced (the sampler applies this mask to every sampled token); the grammar
then stands down for that call instead of failing the request.

Not for: reading the call out of the text (server/output) or tensors (the
sampler turns `allowed_tokens()` into a logit mask). No torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import llguidance
import numpy as np

from models.grammar_vocabulary import GrammarVocabulary, Mask


@dataclass(frozen=True)
class CallGrammarVocabulary:
    """What a checkpoint needs for call grammars: its grammars, and the single-token opener and
    closer of its Hermes calls."""

    grammars: GrammarVocabulary
    opener: int
    closer: int


def call_grammar_vocabulary(grammars: GrammarVocabulary | None, call_format: str | None, opener: int | None,
                            encode: Callable[[str], Sequence[int]]) -> CallGrammarVocabulary | None:
    """The vocabulary for call grammars, or None when this checkpoint cannot have them: a format
    other than Hermes (the grammar is Hermes' shape), no single-token opener (`opener`: the family's
    call opener as the window's anchor token, scheduler/window.resolve_anchor_token) or closer (the
    grammar arms and ends on token ids), or no grammars at all (models/grammar_vocabulary.py)."""
    if call_format != "hermes" or grammars is None or opener is None:
        return None
    closer = encode("</tool_call>")
    if len(closer) != 1:
        return None
    return CallGrammarVocabulary(grammars, opener, closer[0])


def hermes_call_schema(tools: Sequence[dict]) -> dict:
    """JSON schema of one Hermes call's body, `{"name": ..., "arguments": {...}}`, for any of `tools`.

    `tools` are OpenAI tool definitions; a function without `parameters` takes any object (OpenAI
    treats it as taking none, and a client may still describe its arguments in prose). Declared
    properties are the only ones, unless the schema says `additionalProperties` itself.
    """
    alternatives = []
    for tool in tools:
        function = tool["function"]
        parameters = function.get("parameters") or {"type": "object"}
        if "properties" in parameters and "additionalProperties" not in parameters:
            # Arguments the tool does not declare are a call its executor rejects (OpenAI's strict
            # mode says the same); JSON Schema's own default would let a model invent keys.
            parameters = {**parameters, "additionalProperties": False}
        alternatives.append({"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                             "properties": {"name": {"const": function["name"]}, "arguments": parameters}})
    # The separators json.dumps and the templates' tojson write, and no other whitespace: a model
    # trained on rendered calls writes exactly these, and a random or confused one cannot wander
    # off into tabs and newlines between keys.
    return {"anyOf": alternatives,
            "x-guidance": {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}}


def hermes_call_grammar(tools: Sequence[dict], closer: int) -> str:
    """Lark grammar for what follows the opener: newline, one call as JSON, newline, the closer token."""
    return f'start: "\\n" call "\\n" <[{closer}]>\ncall: %json {json.dumps(hermes_call_schema(tools))}\n'


class ToolCallGrammar:
    """One sequence's lazy call grammar: `allowed_tokens()` before sampling, `accept(token)` after."""

    def __init__(self, grammar: str, vocabulary: CallGrammarVocabulary) -> None:
        self._grammar = grammar
        self._vocabulary = vocabulary
        self._matcher: llguidance.LLMatcher | None = None
        self._mask = Mask(vocabulary.grammars.tokenizer)

    @property
    def armed(self) -> bool:
        return self._matcher is not None

    def forced_token(self) -> int | None:
        return None

    def allowed_tokens(self) -> np.ndarray | None:
        """While a call is open: the tokens that keep it valid, as a bitmask [ceil(vocab / 32)] int32
        (bit `t % 32` of word `t // 32` set for token t). None while nothing is constrained."""
        allowed = self._mask.of(self._matcher) if self._matcher is not None else None
        if allowed is None:
            self._matcher = None  # nothing open, or a matcher in error: stand down
        return allowed

    def accept(self, token: int) -> None:
        if self._matcher is None:
            if token == self._vocabulary.opener:
                # A fresh copy per call: one in an error state stays there, and reset() keeps it so.
                matcher = self._vocabulary.grammars.compiled(self._grammar)
                self._matcher = None if matcher.is_error() else matcher
            return
        if not self._matcher.consume_token(token) or self._matcher.is_stopped():
            # Stopped: the closer ended the call. Refused: a forced token the grammar did not allow.
            self._matcher = None
