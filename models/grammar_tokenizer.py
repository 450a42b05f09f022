"""llguidance's view of a checkpoint's tokenizer, built once per server for every grammar.

What it is for: the tool-call grammar (models/tool_call_grammar.py) and the
response-format grammar (models/response_format_grammar.py) compute token
masks from it. Its end-of-sequence id is the checkpoint's first end-of-turn
id, so a grammar that is complete lets exactly that one through.

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
        # One id: the first end-of-turn id, the one a complete grammar lets through (and the one the
        # response grammar forces). llguidance before 1.7 takes a single id only.
        return llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=n_vocab, eos_token=eos_ids[0] if eos_ids else None)
    except ValueError:  # not a fast tokenizer
        return None
