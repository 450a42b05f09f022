"""Schema-constrained tool calls: once the model opens a call, the call must fit one of the offered tools.

What it is for: llama.cpp's lazy tool-call grammar. While the model writes
freely (a thought, prose) nothing is constrained; the family's call opener
token (the same single token the window anchors on) arms the grammar, and
from there every token must keep the text a prefix of one call block:

    hermes (Qwen):   <tool_call>\\n{"name": <offered tool>, "arguments": <its parameters>}\\n</tool_call>
    mistral, list:   [TOOL_CALLS] [{"name": ..., "arguments": ..., "id"?: <9 letters/digits>}, ...]
    mistral, v11:    [TOOL_CALLS]<offered tool>[ARGS]<its parameters>
    llama3_json:     <|python_tag|>{"name": <offered tool>, "parameters": <its parameters>}; ...<|eom_id|>
                     or the same calls as the whole message, with no opener

The block's end (Hermes' closer token, the list's `]`, the v11 arguments'
last brace, Llama's end token) disarms it; the next opener (a parallel call)
arms it again -- unless the request says `parallel_tool_calls: false`: then
the end of turn is forced after the first call, and the list forms hold one
call. Llama 3.1 writes calls to a client's tools as a bare JSON message, so
for that format the grammar also arms, as llama.cpp's does, once the message
starts with `{"name": "` (llama.cpp's trigger pattern, in llama.cpp's bounded
JSON spacing -- nothing, a space, or a newline and some indentation -- and
maybe after `"type": "function", `); until then, and in any message that starts otherwise, nothing is
constrained. A small model's call then always parses, names a
tool the client offered, and has the arguments the schema requires, with
the types and enums it gives. What the values say (which city, which
number) stays the model's.

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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import llguidance
import numpy as np

from models.grammar_vocabulary import JSON_WHITESPACE, GrammarVocabulary, Mask
from models.json_fraction_guard import FractionGuard
from models.json_schema_tightening import tightened


@dataclass(frozen=True)
class CallGrammarVocabulary:
    """What a checkpoint needs for call grammars: its grammars, its call format, and the single-token
    markers that format's blocks use: the opener (Llama's `<|python_tag|>` may be missing: its calls
    then arm on the message's start alone), Hermes' closer, Mistral v11's `[ARGS]` (None: the list
    form), Llama's end tokens (`<|eom_id|>`, `<|eot_id|>`: those the tokenizer has as one token)."""

    grammars: GrammarVocabulary
    opener: int | None
    closer: int | None
    format: str = "hermes"
    args: int | None = None
    ends: tuple[int, ...] = ()


def call_grammar_vocabulary(grammars: GrammarVocabulary | None, call_format: str | None, opener: int | None,
                            encode: Callable[[str], Sequence[int]]) -> CallGrammarVocabulary | None:
    """The vocabulary for call grammars, or None when this checkpoint cannot have them: no known call
    format, no single-token opener (`opener`: the family's call opener as the window's anchor token,
    scheduler/window.resolve_anchor_token) where the format arms on it alone (Hermes, Mistral), a
    Hermes closer that is not one token (the grammar ends on token ids), or no grammars at all
    (models/grammar_vocabulary.py). A Mistral tokenizer with `[ARGS]` as one token writes v11 calls."""
    if grammars is None:
        return None
    if call_format == "llama3_json":
        ends = tuple(ids[0] for ids in map(encode, LLAMA_ENDS) if len(ids) == 1)
        return CallGrammarVocabulary(grammars, opener, None, "llama3_json", ends=ends)
    if opener is None:
        return None
    if call_format == "hermes":
        closer = encode("</tool_call>")
        return CallGrammarVocabulary(grammars, opener, closer[0]) if len(closer) == 1 else None
    if call_format == "mistral":
        return CallGrammarVocabulary(grammars, opener, None, "mistral", mistral_args_token(encode))
    return None


MISTRAL_ARGS = "[ARGS]"
# What ends a Llama 3 call message: `<|eom_id|>` after a python-tag call (Llama 3.1), `<|eot_id|>` otherwise.
LLAMA_ENDS = ("<|eom_id|>", "<|eot_id|>")
# llama.cpp's trigger for a bare Llama call, at the message's start after any whitespace: `{"name": "`,
# maybe after `"type": "function", ` (Llama 3.2 writes that). The grammar, fed the message from its start,
# must accept it too, so the spacing is the grammar's (JSON_WHITESPACE). A message that cannot start so is
# left alone.
LLAMA_BARE_CALL = re.compile(rb'\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?"name"\s*:\s*"')


def mistral_args_token(encode: Callable[[str], Sequence[int]]) -> int | None:
    """`[ARGS]` as one token id -- a v11 Mistral tokenizer, whose model writes `[TOOL_CALLS]name[ARGS]{...}`
    -- or None (the list form). Found once at load: the forced prefix of a named tool_choice needs it
    too, with or without grammars (server/runtime.RuntimeInfo.mistral_args)."""
    args = encode(MISTRAL_ARGS)
    return args[0] if len(args) == 1 else None


def call_grammar(tools: Sequence[dict], vocabulary: CallGrammarVocabulary, single: bool = False) -> str:
    """Lark grammar for what follows the opener in `vocabulary`'s format, for calls of `tools`;
    `single`: one call in all (a Hermes or v11 block holds one anyway; ToolCallGrammar ends the turn)."""
    if vocabulary.format == "hermes":
        return hermes_call_grammar(tools, vocabulary.closer)
    if vocabulary.format == "llama3_json":
        return llama3_call_grammar(tools, vocabulary.ends, single)
    if vocabulary.args is not None:
        return mistral_named_call_grammar(tools, vocabulary.args)
    return mistral_list_call_grammar(tools, single)


def _parameters(function: dict) -> dict:
    """A function's arguments schema: any object without `parameters` (OpenAI treats it as taking none,
    and a client may still describe its arguments in prose); declared properties are the only ones,
    unless the schema says `additionalProperties` itself."""
    parameters = function.get("parameters") or {"type": "object"}
    if "properties" in parameters and "additionalProperties" not in parameters:
        # Arguments the tool does not declare are a call its executor rejects (OpenAI's strict
        # mode says the same); JSON Schema's own default would let a model invent keys.
        parameters = {**parameters, "additionalProperties": False}
    # Nested objects closed and numbers bounded as well, as llama.cpp's grammars (models/json_schema_tightening.py).
    return tightened(parameters)


def _own_resource(parameters: dict, index: int) -> dict:
    """`parameters` as a schema resource of its own (an `$id`, unless it has one), so that its local
    references (`#`, `#/$defs/X`, `#/definitions/X`) keep resolving against it when it sits inside a
    call object's schema.

    Why: pydantic (and so the openai SDK's `pydantic_function_tool`) puts nested models and enums in
    `$defs` and refers to them as `#/$defs/X`. Moved into a call object without an `$id`, those pointers
    resolved against the call schema's root and named nothing: the grammar engine refused the whole
    schema, which left the calls unconstrained. (Rewriting the pointers instead has to tell schema
    keywords from property names, and breaks on parameters that declare an `$id` of their own.)
    """
    if "$id" in parameters:
        return parameters
    return {"$id": f"urn:anchorage:tool:{index}", **parameters}


# The separators json.dumps and the templates' tojson write, and no other whitespace: a model
# trained on rendered calls writes exactly these, and a random or confused one cannot wander
# off into tabs and newlines between keys.
_DUMPS_SEPARATORS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# Llama 3 calls, as llama.cpp's grammar for them: its trigger takes any spacing, so the call may go on
# in the spacing it opened with -- llama.cpp's bounded JSON whitespace.
_LLAMA_WHITESPACE = {"whitespace_flexible": True, "whitespace_pattern": JSON_WHITESPACE}


def call_object_schema(tools: Sequence[dict], call_id: bool = False, args_key: str = "arguments",
                       llama: bool = False) -> dict:
    """JSON schema of one call object, `{"name": ..., "arguments": {...}}`, for any of `tools`
    (OpenAI tool definitions); `call_id`: Mistral's optional 9-character `"id"` may follow;
    `args_key`: the arguments' key (Llama 3's is "parameters"); `llama`: as llama.cpp's Llama 3
    grammar, `"type": "function"` may come first and the spacing is llama.cpp's, not json.dumps'."""
    alternatives = []
    for tool in tools:
        function = tool["function"]
        # llguidance keeps the properties in this order: an optional "type" can only come first.
        properties = {"type": {"const": "function"}} if llama else {}
        properties |= {"name": {"const": function["name"]},
                       args_key: _own_resource(_parameters(function), len(alternatives))}
        if call_id:
            properties["id"] = {"type": "string", "pattern": "^[A-Za-z0-9]{9}$"}
        alternatives.append({"type": "object", "additionalProperties": False, "required": ["name", args_key],
                             "properties": properties})
    return {"anyOf": alternatives, "x-guidance": _LLAMA_WHITESPACE if llama else _DUMPS_SEPARATORS}


def hermes_call_grammar(tools: Sequence[dict], closer: int) -> str:
    """Lark grammar for what follows the opener: newline, one call as JSON, newline, the closer token."""
    return f'start: "\\n" call "\\n" <[{closer}]>\ncall: %json {json.dumps(call_object_schema(tools))}\n'


def mistral_list_call_grammar(tools: Sequence[dict], single: bool = False) -> str:
    """Lark grammar for what follows `[TOOL_CALLS]` in the list form: a JSON list of call objects
    (v3 templates write a space before it; the forced prefix of a named tool_choice does not);
    `single`: a list of one (parallel_tool_calls false)."""
    call = json.dumps(call_object_schema(tools, call_id=True))
    more = "" if single else ' (", " call)*'
    return f'start: " "? "[" call{more} "]"\ncall: %json {call}\n'


def mistral_named_call_grammar(tools: Sequence[dict], args: int) -> str:
    """Lark grammar for what follows `[TOOL_CALLS]` in the v11 form: an offered tool's name, the
    `[ARGS]` token, then that tool's arguments object."""
    rules = []
    for i, tool in enumerate(tools):
        function = tool["function"]
        schema = {**_parameters(function), "x-guidance": _DUMPS_SEPARATORS}
        rules.append(f"call{i}: {json.dumps(function['name'])} <[{args}]> args{i}\nargs{i}: %json {json.dumps(schema)}")
    return "start: " + " | ".join(f"call{i}" for i in range(len(tools))) + "\n" + "\n".join(rules) + "\n"


def _llama3_calls(tools: Sequence[dict], single: bool) -> tuple[str, list[str]]:
    """Llama 3 calls of `tools` as Lark: the expression (whitespace, then calls joined by "; ", as the
    parser reads them) and the rules it uses."""
    schema = call_object_schema(tools, args_key="parameters", llama=True)
    more = "" if single else ' ("; " llama_call)*'
    return f"LLAMA_SPACE? llama_call{more}", ["LLAMA_SPACE: /[ \\t\\n]+/", f"llama_call: %json {json.dumps(schema)}"]


def llama3_call_grammar(tools: Sequence[dict], ends: Sequence[int] = (), single: bool = False) -> str:
    """Lark grammar for a Llama 3 call message from its start (or after `<|python_tag|>`): calls of
    `tools` as `{"name": ..., "parameters": ...}` joined by "; ", then one of `ends` (none: the
    grammar engine's own end of sequence follows); `single`: one call (parallel_tool_calls false)."""
    calls, rules = _llama3_calls(tools, single)
    end = " (" + " | ".join(f"<[{token}]>" for token in ends) + ")" if ends else ""
    return "\n".join([f"start: {calls}{end}", *rules]) + "\n"


@dataclass(frozen=True)
class CallBlocks:
    """Lark rules defining `call_block`, one whole call block with its opener token, in a vocabulary's
    format, and how parallel blocks follow each other: `separator` (Lark text) between blocks, or None
    when one block holds every call (Mistral's list)."""

    rules: tuple[str, ...]
    separator: str | None


def call_blocks(tools: Sequence[dict], vocabulary: CallGrammarVocabulary, single: bool = False) -> CallBlocks:
    """The blocks a turn grammar (models/response_format_grammar.py) may use for calls of `tools`: the
    lazy grammars above, each with its opener in front. `single`: one call (parallel_tool_calls false)."""
    if vocabulary.opener is None:
        # Only Llama's format arms without an opener, and a bare call there is also JSON: it could not be
        # told from the JSON answer. (call_grammar_vocabulary gives the other formats none without one.)
        raise ValueError("a JSON-answer turn needs a call opener token to tell calls from the answer")
    opener = f"<[{vocabulary.opener}]>"
    if vocabulary.format == "llama3_json":
        calls, rules = _llama3_calls(tools, single)
        return CallBlocks((f"call_block: {opener} {calls}", *rules), None)
    if vocabulary.format == "hermes":
        lazy = hermes_call_grammar(tools, vocabulary.closer).replace("start:", f"call_block: {opener}", 1)
        return CallBlocks(tuple(lazy.strip().split("\n")), '"\\n"')
    if vocabulary.args is not None:
        lazy = mistral_named_call_grammar(tools, vocabulary.args).replace("start:", "call_alternatives:", 1)
        return CallBlocks((f"call_block: {opener} call_alternatives", *lazy.strip().split("\n")), '""')
    lazy = mistral_list_call_grammar(tools, single).replace("start:", f"call_block: {opener}", 1)
    return CallBlocks(tuple(lazy.strip().split("\n")), None)


class ToolCallGrammar:
    """One sequence's lazy call grammar: `allowed_tokens()` before sampling, `accept(token)` after.

    `single` (the request's `parallel_tool_calls: false`): the first call the grammar completes ends
    the turn -- the end-of-turn token is forced right after it, as llama.cpp's grammar for one call
    ends the generation there -- so no second call is written only to be dropped."""

    def __init__(self, grammar: str, vocabulary: CallGrammarVocabulary, single: bool = False) -> None:
        self._grammar = grammar
        self._vocabulary = vocabulary
        self._matcher: llguidance.LLMatcher | None = None
        self._mask = Mask(vocabulary.grammars.tokenizer)
        self._fraction = FractionGuard(vocabulary.grammars.tokenizer)  # no 17th digit after a number's point
        self._end_of_turn = vocabulary.grammars.end_of_turn if single else None
        self._ending = False  # a single call is complete: the end of turn is forced next
        # Llama's bare calls: while the message may still open as a call, the call grammar fed with its
        # tokens so far (constraining nothing yet), and their text; None once it cannot (or for other formats).
        self._watch = self._fresh_matcher() if vocabulary.format == "llama3_json" else None
        self._head_text = b""

    @property
    def armed(self) -> bool:
        return self._matcher is not None

    def forced_token(self) -> int | None:
        return self._end_of_turn if self._ending else None

    def allowed_tokens(self) -> np.ndarray | None:
        """While a call is open: the tokens that keep it valid, as a bitmask [ceil(vocab / 32)] int32
        (bit `t % 32` of word `t // 32` set for token t). None while nothing is constrained."""
        allowed = self._mask.of(self._matcher) if self._matcher is not None else None
        if allowed is None:
            self._matcher = None  # nothing open, or a matcher in error: stand down
            return None
        return self._fraction.narrowed(allowed)

    def accept(self, token: int) -> None:
        if self._ending:
            self._ending = False  # the forced end of turn (or whatever another processor forced)
            return
        if self._matcher is None:
            if token == self._vocabulary.opener:
                self._watch = None
                self._matcher = self._fresh_matcher()
            elif self._watch is not None:
                self._watch_bare_call(token)
            return
        self._consume(token)

    def _fresh_matcher(self) -> llguidance.LLMatcher | None:
        # A fresh copy per call: one in an error state stays there, and reset() keeps it so.
        matcher = self._vocabulary.grammars.compiled(self._grammar)
        return None if matcher.is_error() else matcher

    def _consume(self, token: int) -> None:
        if not self._matcher.consume_token(token):
            self._matcher = None  # a forced token the grammar did not allow: stand down
            return
        self._fraction.seen(token)
        if self._matcher.is_stopped():
            # The block's end ended the call; with `single`, the turn ends with it (Llama's ends end it).
            self._matcher = None
            self._ending = (self._end_of_turn is not None and token != self._end_of_turn
                            and token not in self._vocabulary.ends)

    def _watch_bare_call(self, token: int) -> None:
        """Llama's trigger: the message's tokens go into the call grammar from its start, unconstrained;
        once its text (after whitespace) opens with LLAMA_BARE_CALL that grammar is armed, and once the
        grammar refuses a token the message is not a call (prose, other JSON): stop watching."""
        if not self._watch.consume_token(token):
            self._watch = None
            return
        self._head_text += self._vocabulary.grammars.tokenizer.decode_bytes([token])
        if LLAMA_BARE_CALL.match(self._head_text.lstrip(b" \t\n")):
            self._matcher, self._watch = self._watch, None
