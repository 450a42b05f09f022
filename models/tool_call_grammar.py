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
it); each sequence gets its own matcher, built at its first opener and reset
at the next. A token the matcher refuses can only be one another processor
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
import llguidance.numpy
import numpy as np


@dataclass(frozen=True)
class CallGrammarVocabulary:
    """What a checkpoint needs for call grammars: llguidance's view of its tokenizer, and the
    single-token opener and closer of its Hermes calls."""

    tokenizer: llguidance.LLTokenizer
    opener: int
    closer: int


def call_grammar_vocabulary(tokenizer: llguidance.LLTokenizer | None, call_format: str | None,
                            encode: Callable[[str], Sequence[int]]) -> CallGrammarVocabulary | None:
    """The vocabulary for call grammars, or None when this checkpoint cannot have them: a format
    other than Hermes (the grammar is Hermes' shape), an opener or closer that is not one token (the
    grammar arms on a token id), or no grammar tokenizer (models/grammar_tokenizer.py)."""
    if call_format != "hermes" or tokenizer is None:
        return None
    opener, closer = encode("<tool_call>"), encode("</tool_call>")
    if len(opener) != 1 or len(closer) != 1:
        return None
    return CallGrammarVocabulary(tokenizer, opener[0], closer[0])


def hermes_call_grammar(tools: Sequence[dict], closer: int) -> str:
    """Lark grammar for what follows the opener: newline, one call as JSON, newline, the closer token.

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
    schema = {"anyOf": alternatives,
              "x-guidance": {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}}
    return f'start: "\\n" call "\\n" <[{closer}]>\ncall: %json {json.dumps(schema)}\n'


def grammar_error(grammar: str, tokenizer: llguidance.LLTokenizer) -> str | None:
    """Why llguidance cannot compile `grammar` (a schema it does not support), in one line, or None."""
    error = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
    if not error:
        return None
    # llguidance's report is its first line, the regex or schema error's own "error: ..." line, then
    # the grammar text (the schema, which the client already has).
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    return " ".join([lines[0]] + [line for line in lines[1:] if line.startswith("error:")])


class ToolCallGrammar:
    """One sequence's lazy call grammar: `allowed_tokens()` before sampling, `accept(token)` after."""

    def __init__(self, grammar: str, tokenizer: llguidance.LLTokenizer, opener: int) -> None:
        self._grammar = grammar
        self._tokenizer = tokenizer
        self._opener = opener
        self._matcher: llguidance.LLMatcher | None = None
        self._armed = False
        self._mask = llguidance.numpy.allocate_token_bitmask(1, tokenizer.vocab_size)  # [1, ceil(vocab / 32)]

    @property
    def armed(self) -> bool:
        return self._armed

    def forced_token(self) -> int | None:
        return None

    def allowed_tokens(self) -> np.ndarray | None:
        """While a call is open: the tokens that keep it valid, as a bitmask [ceil(vocab / 32)] int32
        (bit `t % 32` of word `t // 32` set for token t). None while nothing is constrained."""
        if not self._armed:
            return None
        llguidance.numpy.fill_next_token_bitmask(self._matcher, self._mask)
        return self._mask[0]

    def accept(self, token: int) -> None:
        if not self._armed:
            if token == self._opener:
                self._arm()
            return
        if not self._matcher.consume_token(token) or self._matcher.is_stopped():
            # Stopped: the closer ended the call. Refused: a forced token the grammar did not allow.
            self._armed = False

    def _arm(self) -> None:
        if self._matcher is None:
            self._matcher = llguidance.LLMatcher(self._tokenizer, self._grammar, log_level=0)
        else:
            self._matcher.reset()
        self._armed = not self._matcher.is_error()
