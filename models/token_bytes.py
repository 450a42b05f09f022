"""The raw bytes of one token id, for code that must not split a UTF-8 character.

The reasoning-budget machine waits before forcing its closer while the text
ends mid-character, and the logprobs `bytes` field wants each token's bytes.
Decoding a lone token with the tokenizer loses exactly that information (a
partial character comes back as U+FFFD), so we undo the tokenizer's own byte
mapping instead:

- byte-level BPE (GPT-2, Llama 3, Qwen): each token string is bytes under the
  GPT-2 bytes-to-unicode table; invert it;
- SentencePiece-style byte fallback: `<0xE2>` pieces are single bytes and `▁`
  is a space;
- anything else (added/special tokens): the token's text in UTF-8.
"""

from __future__ import annotations

from functools import lru_cache


def _bytes_to_unicode() -> dict[int, str]:
    # The GPT-2 table: printable bytes map to themselves, the rest are shifted
    # past 255 so every byte has a visible stand-in.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


def is_byte_level(tokenizer) -> bool:
    """The tokenizer spells its pieces in the GPT-2 byte-to-character table (its decoder is ByteLevel)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    decoder = backend.decoder
    return decoder is not None and "ByteLevel" in repr(decoder)


def make_token_bytes(tokenizer):
    """A cached `token_bytes(id) -> bytes` for this tokenizer."""
    byte_level = is_byte_level(tokenizer)
    added = {int(i): tok.content for i, tok in tokenizer.added_tokens_decoder.items()}

    @lru_cache(maxsize=None)
    def token_bytes(token_id: int) -> bytes:
        if token_id in added:
            return added[token_id].encode("utf-8")
        piece = tokenizer.convert_ids_to_tokens(int(token_id))
        if piece is None:
            return b""
        if byte_level and all(ch in _UNICODE_TO_BYTE for ch in piece):
            return bytes(_UNICODE_TO_BYTE[ch] for ch in piece)
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece.replace("▁", " ").encode("utf-8")

    return token_bytes
