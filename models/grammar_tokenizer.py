"""llguidance's view of a checkpoint's tokenizer, built once per server for every grammar.

What it is for: the tool-call grammar (models/tool_call_grammar.py) and the
response-format grammar (models/response_format_grammar.py) compute token
masks from it. Its end-of-sequence ids are the checkpoint's end-of-turn ids,
so a grammar that is complete lets exactly those through.

Why a module of its own: building it reads the whole vocabulary (a second on
a large one); both grammars share the one instance. Only fast (Rust)
tokenizers can be read; for any other there are no grammars. No torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import llguidance
import llguidance.hf


def grammar_tokenizer(hf_tokenizer, n_vocab: int, eos_ids: Sequence[int]) -> llguidance.LLTokenizer | None:
    """The tokenizer for grammars over a `n_vocab`-wide logit row, or None when llguidance cannot read it."""
    try:
        return llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=n_vocab, eos_token=list(eos_ids) or None)
    except ValueError:  # not a fast tokenizer
        return None
