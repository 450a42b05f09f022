"""`response_format` json_object / json_schema: the answer must be JSON (of the schema), after any thought.

What it is for: OpenAI's structured output, as vLLM and llama.cpp's server
offer it. The whole turn is constrained from its first token to the end of
turn: an optional thought (free text between the family's single-token
opener and closer -- or, when the prompt already opened the thought, free
text up to the closer; special tokens other than the closer are not text), at
most 20 whitespace characters, one JSON value of the schema, then only the
end-of-turn token (models/grammar_vocabulary.py says which). When the request
also offers tools, the part after the thought is either that JSON or tool
calls of the offered tools in the checkpoint's call format
(tool_call_grammar.call_blocks), as OpenAI allows structured output and
tools in one request.

Why it is shaped so: the thought stays free, as vLLM and llama.cpp keep
reasoning outside the structured part, and the reasoning budget can still
close it (its forced message is free text, its closer is the grammar's
closer). The JSON may carry llama.cpp's whitespace between tokens (nothing,
a space, or a newline and up to 20 spaces or tabs): models write pretty JSON,
and a bound keeps a confused model from padding forever. Same engine
(llguidance) and the same processor protocol as the tool-call grammar;
unlike it, this one is armed from the first token and ends with the turn.

Not for: checking the request's fields (server/protocol) or tensors. No torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from models.grammar_vocabulary import JSON_WHITESPACE, GrammarVocabulary, Mask
from models.json_fraction_guard import FractionGuard
from models.json_schema_tightening import tightened
from models.tool_call_grammar import CallBlocks


@dataclass(frozen=True)
class TurnCalls:
    """Tool calls a JSON-answer turn may make instead of answering: `blocks` (tool_call_grammar.call_blocks)
    defines one call block in the checkpoint's format and how parallel ones follow each other.
    `required`: the turn must call (tool_choice "required" or named). `single`: one block at most
    (parallel_tool_calls false)."""

    blocks: CallBlocks
    required: bool = False
    single: bool = False


def response_grammar(schema: dict, thought: tuple[int, int] | None, thought_open: bool,
                     calls: TurnCalls | None = None) -> str:
    """Lark grammar of a turn whose answer is one JSON value of `schema`.

    `thought`: the (opener, closer) token ids of the family's thought, or None when the family has
    none (or its markers are not single tokens: then no thought is allowed). `thought_open`: the
    prompt already opened it, so the turn starts inside the thought. `calls`: the request also
    offers tools, so after the thought the turn is either the JSON answer or tool calls (only calls
    when they are required) -- OpenAI's structured output with tools.
    """
    # Closed objects and bounded numbers, as llama.cpp's grammars (models/json_schema_tightening.py).
    schema = {**tightened(schema), "x-guidance": {"whitespace_pattern": JSON_WHITESPACE}}
    lines = [f"answer: %json {json.dumps(schema)}", 'GAP: /[ \\t\\n]{0,20}/']
    turn = "answer"
    if calls is not None:
        turn = "calls" if calls.required else "(answer | calls)"
        separator = calls.blocks.separator
        more = "" if calls.single or separator is None else f" ({separator} call_block)*"
        lines += ["calls: call_block" + more, *calls.blocks.rules]
    if thought is None:
        lines.insert(0, f"start: GAP {turn}")
    else:
        opener, closer = thought
        lines.append("THOUGHT_TEXT: /(.|\\n)*/")
        if thought_open:
            lines.insert(0, f"start: THOUGHT_TEXT <[{closer}]> GAP {turn}")
        else:
            lines.insert(0, f"start: (<[{opener}]> THOUGHT_TEXT <[{closer}]>)? GAP {turn}")
    return "\n".join(lines) + "\n"


def value_grammar(schema: dict) -> str:
    """Lark grammar of one JSON value of `schema` and nothing else: for asking whether any value can begin
    (GrammarVocabulary.start_error). A schema that only refers to itself (`{"$ref": "#"}`) compiles, but no
    value satisfies it; inside the turn grammar that shows only after the whitespace runs out."""
    return f"start: %json {json.dumps(tightened(schema))}\n"


class ResponseGrammar:
    """One sequence's answer grammar: `allowed_tokens()` before sampling, `accept(token)` after."""

    def __init__(self, grammar: str, vocabulary: GrammarVocabulary) -> None:
        self._matcher = vocabulary.compiled(grammar)
        self._armed = not self._matcher.is_error()
        self._end_of_turn = vocabulary.end_of_turn
        self._finished = False  # the JSON is complete: only the end of turn may follow
        self._mask = Mask(vocabulary.tokenizer)
        self._fraction = FractionGuard(vocabulary.tokenizer)  # no 17th digit after a number's point

    @property
    def armed(self) -> bool:
        return self._armed

    def forced_token(self) -> int | None:
        return self._end_of_turn if self._finished else None

    def allowed_tokens(self) -> np.ndarray | None:
        """The tokens that keep the turn valid, as a bitmask [ceil(vocab / 32)] int32; None once the
        JSON is complete (then `forced_token()` ends the turn)."""
        allowed = self._mask.of(self._matcher) if self._armed else None
        self._armed = allowed is not None  # a matcher in error stands down
        return None if allowed is None else self._fraction.narrowed(allowed)

    def accept(self, token: int) -> None:
        if self._finished:
            self._finished = False  # the end of turn, forced: nothing is left to constrain
            return
        if not self._armed:
            return
        if not self._matcher.consume_token(token):
            self._armed = False  # a token another processor forced: stand down rather than fail
            return
        self._fraction.seen(token)
        if self._matcher.is_stopped():
            # llguidance stops once nothing but its end-of-sequence can follow: the JSON is complete.
            self._armed = False
            self._finished = self._end_of_turn is not None and token != self._end_of_turn
