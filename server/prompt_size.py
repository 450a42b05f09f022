"""Refuse a prompt that cannot fit the context from its length alone, before tokenizing it.

What it is for: a body just under the size limit (32 MiB) holds tens of millions of characters, and the
tokenizer reads about a megabyte a second: such a prompt used to get its `context_length_exceeded` 400
after a minute of tokenizer time, holding a tokenizer lane all along. No token can stand for more than
the vocabulary's longest piece, so a text longer than that many times the context is over it, with no
need to count.

Why it is shaped so: the bound must never refuse a prompt that fits. A BPE token covers at most
`longest` bytes of the normalized text, and a character is at least a byte; a normalizer may still
shrink the text (NFC composes three Hangul jamo, nine bytes, into one three-byte syllable), so the
bound takes four times the longest piece. It is used only where each of those holds, and otherwise
the prompt is counted as before:
- the normalizers shrink text by less than that (none, NFC, or the space-to-"▁" replacements
  SentencePiece conversions add; one that collapses whitespace could shrink text without limit);
- the model is BPE that spells every character (byte-level, or byte fallback, or an unknown token
  per unknown character): WordLevel and WordPiece take a whole unknown word as one token, fused
  unknowns a whole run, and a BPE with no way to spell a character drops it;
- no added token strips the whitespace beside it (Phi-3's `<|assistant|>` swallows any run of it).
"""

from __future__ import annotations

import json

from models.token_bytes import is_byte_level
from server.errors import ExceedContextSizeError

SLACK = 4  # a normalizer's worst shrinking (NFC) is 3x; see the module docstring

_BOUNDED = {"NFC", "Prepend"}  # normalizers that never shrink text more than SLACK allows for


def longest_piece_bytes(tokenizer) -> int | None:
    """Bytes of the vocabulary's longest piece (an upper bound on the text one token covers), or None when
    the tokenizer's normalizers may shrink text without a bound, or it cannot be read."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:  # the normalizer's own JSON (what tokenizer.json holds for it), without serializing the vocabulary
        normalizer = json.loads(backend.normalizer.__getstate__()) if backend.normalizer is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
    if not _bounded(normalizer) or not _spells_every_character(tokenizer, backend):
        return None
    if any(token.lstrip or token.rstrip for token in tokenizer.added_tokens_decoder.values()):
        return None
    # Byte-level pieces are spelt one character per byte, SentencePiece's "▁" (3 bytes) stands for one:
    # either way the UTF-8 length of the piece's spelling is at least the bytes it covers.
    return max((len(piece.encode("utf-8")) for piece in tokenizer.get_vocab()), default=None)


def _spells_every_character(tokenizer, backend) -> bool:
    model = backend.model
    if type(model).__name__ != "BPE":
        return False
    if is_byte_level(tokenizer) or getattr(model, "byte_fallback", False):
        return True
    return getattr(model, "unk_token", None) is not None and not getattr(model, "fuse_unk", False)


def _bounded(normalizer) -> bool:
    if normalizer is None:
        return True
    kind = normalizer.get("type")
    if kind == "Sequence":
        return all(_bounded(n) for n in normalizer.get("normalizers", ()))
    if kind == "Replace":  # SentencePiece conversions: " " -> "▁", which only grows the text
        pattern, content = normalizer.get("pattern") or {}, normalizer.get("content", "")
        single = pattern.get("String")
        return isinstance(single, str) and len(content.encode("utf-8")) >= len(single.encode("utf-8"))
    return kind in _BOUNDED


def refuse_surely_too_long(text: str, longest: int | None, n_ctx: int, param: str) -> None:
    """A context-length 400 for `text` when even its fewest possible tokens fill the context (the count
    reported is that lower bound, said to be one); nothing when it might fit or there is no bound."""
    if longest is None or longest <= 0:
        return
    fewest = len(text) // (SLACK * longest)
    if fewest >= n_ctx:
        raise ExceedContextSizeError(fewest, n_ctx, param=param, message=(
            f"the request exceeds the available context size: at least {fewest} tokens requested (bounded "
            f"from its {len(text)} characters without counting them), but this model's maximum context "
            f"length is {n_ctx} tokens"))
