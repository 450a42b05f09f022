"""Grammars over a checkpoint's vocabulary: llguidance's view of its tokenizer and the compiled grammars.

What it is for: the tool-call grammar (models/tool_call_grammar.py) and the
response-format grammar (models/response_format_grammar.py) compute token
masks from `GrammarVocabulary.tokenizer`. Its end-of-sequence id is the
end-of-turn id a complete grammar lets through (and the response grammar
forces): the tokenizer's own EOS when the engine stops on it (Qwen's
`<|im_end|>`, Llama 3's `<|eot_id|>`), else the checkpoint's first one.

Why it is shaped so: reading the vocabulary takes up to a second on a large
one, and compiling a grammar takes milliseconds to more for a large schema;
requests repeat the same tools and schemas, so a compiled grammar is kept
(a few dozen, least recently used first out) and every sequence gets a
`deep_copy` of it. Only fast (Rust) tokenizers can be read; for any other
there are no grammars. No torch.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import llguidance
import llguidance.hf
import llguidance.numpy
import numpy as np

log = logging.getLogger(__name__)

COMPILED_KEPT = 64
# llama.cpp's json-schema-to-grammar SPACE_RULE, for JSON that may carry whitespace between tokens (a JSON
# response_format, Llama 3 calls): nothing, one space, or a newline and some indentation -- never unbounded.
JSON_WHITESPACE = "( |\\n[ \\t]{0,20})?"


@dataclass
class GrammarVocabulary:
    tokenizer: llguidance.LLTokenizer
    end_of_turn: int | None
    _compiled: OrderedDict = field(default_factory=OrderedDict)
    # Requests check grammars on the server's event loop, sequences copy them on the engine thread.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def compiled(self, grammar: str) -> llguidance.LLMatcher:
        """A fresh matcher for `grammar` at its start (check `is_error()`: a schema it cannot compile)."""
        with self._lock:
            pristine = self._compiled.pop(grammar, None)
        if pristine is None:
            pristine = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        with self._lock:
            self._compiled[grammar] = pristine
            while len(self._compiled) > COMPILED_KEPT:
                self._compiled.popitem(last=False)
        return pristine.deep_copy()

    def error(self, grammar: str) -> str | None:
        """Why `grammar` cannot be compiled (a schema llguidance does not support), in one line, or None."""
        error = self.compiled(grammar).get_error()
        if not error:
            return None
        # llguidance's report is its first line, the regex or schema error's own "error: ..." line, then
        # the grammar text (the schema, which the client already has).
        lines = [line.strip() for line in error.splitlines() if line.strip()]
        return " ".join([lines[0]] + [line for line in lines[1:] if line.startswith("error:")])


    def start_error(self, grammar: str) -> str | None:
        """Why no token can begin `grammar` (compiled without error), in one line, or None when some token
        can: llguidance finds an empty language (`{"$ref": "#"}`) only when it computes the first mask.
        (A language whose values can begin but never end -- a required property that is the schema
        itself -- is not found here: it nests until max_tokens.)"""
        matcher = self.compiled(grammar)
        if Mask(self.tokenizer).of(matcher) is not None:
            return None
        reason = (matcher.get_error() or "").strip().splitlines()
        # NoExtensionBias is llguidance's stop reason for "nothing may follow": here, an empty language.
        if not reason or reason[0] == "NoExtensionBias":
            return "nothing it allows can begin"
        return reason[0]  # another stop, a parser limit say


class Mask:
    """One sequence's bitmask buffer, [1, ceil(vocab / 32)] int32: bit `t % 32` of word `t // 32` is token t."""

    def __init__(self, tokenizer: llguidance.LLTokenizer) -> None:
        self._words = llguidance.numpy.allocate_token_bitmask(1, tokenizer.vocab_size)

    def of(self, matcher: llguidance.LLMatcher) -> np.ndarray | None:
        """The tokens `matcher` allows next, [ceil(vocab / 32)]; None when it is in error (a parser
        limit, say), where llguidance's own mask would allow nothing but end of sequence."""
        llguidance.numpy.fill_next_token_bitmask(matcher, self._words)
        return None if matcher.is_error() else self._words[0]


def grammar_vocabulary(hf_tokenizer, n_vocab: int, eos_ids: Sequence[int]) -> GrammarVocabulary | None:
    """Grammars over a logit row of at least `n_vocab` ids, or None when llguidance cannot read the tokenizer."""
    own = getattr(hf_tokenizer, "eos_token_id", None)
    end_of_turn = own if own in eos_ids else (eos_ids[0] if eos_ids else None)
    try:
        # The mask covers every id the tokenizer has, even past the model's row (Gemma 3 has one);
        # the sampler trims it to the row.
        tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=max(n_vocab, len(hf_tokenizer)),
                                                 eos_token=end_of_turn)
    except ValueError as exc:  # not a fast tokenizer, or a decoder llguidance cannot read
        log.warning("no grammars for this checkpoint (tool calls unconstrained, response_format json refused): %s", exc)
        return None
    return GrammarVocabulary(tokenizer, end_of_turn)
