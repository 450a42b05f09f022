"""At most 16 digits after a JSON number's point, as llama.cpp's grammars allow: a guard over a grammar's mask.

What it is for: the grammars compile a client's JSON schema with llguidance,
which bounds a number's integral digits once the schema bounds its value
(models/json_schema_tightening.py) but has no keyword or option that bounds
the digits after the point. A confused model then writes `0.3000000...`
until `max_tokens`, and the client's parse fails (LangChain's
with_structured_output, measured on the demo model). llama.cpp's grammar
allows `[0-9]{1,16}` there.

Why it is shaped so: the guard follows the text with a JSON lexer as small
as it can be -- inside a string or not (escapes included), and how many
digits follow a point that followed a digit -- which a special token (a
thought's closer) resets, so a thought's free text does not leave it inside
a string. A fraction outside strings is narrowed only when the grammar's mask
also allows no quote next: in free text (a thought the prompt opened) a quote
may come, in a number's fraction it may not. Then the tokens that would write
a 17th digit are taken out -- a token counts by the digits it begins with, so
15 digits and then "12" are refused too. The guard never empties a mask: if
the grammar allows nothing else (a schema whose range needs more digits), it
stands aside. The vocabulary's tables are built once, on first need.

Not for: compiling grammars (grammar_vocabulary.py). No torch.
"""

from __future__ import annotations

import threading

import numpy as np

MAX_FRACTION_DIGITS = 16  # llama.cpp's decimal-part: [0-9]{1,16}
_DIGITS = frozenset(b"0123456789")


class FractionTables:
    """Per vocabulary: for each digits-left count r (0..16), the bitmask of tokens that begin with more
    than r digits; and the tokens that are a lone quote."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer  # kept alive while cached, so its id() is not reused
        n = tokenizer.vocab_size
        leading = np.zeros(n, dtype=np.int16)
        quotes = []
        for token in range(n):
            raw = tokenizer.decode_bytes([token])
            run = 0
            while run < len(raw) and raw[run] in _DIGITS:
                run += 1
            leading[token] = run
            if raw == b'"':
                quotes.append(token)
        self.quotes = quotes
        self.too_many: list[np.ndarray] = []  # [r] -> int32 words, bit set for a token beginning with > r digits
        for left in range(MAX_FRACTION_DIGITS + 1):
            words = np.zeros((n + 31) // 32, dtype=np.uint32)
            ids = np.nonzero(leading > left)[0]
            np.bitwise_or.at(words, ids // 32, np.left_shift(np.uint32(1), (ids % 32).astype(np.uint32)))
            self.too_many.append(words.view(np.int32))


_tables: dict[int, FractionTables] = {}
_lock = threading.Lock()


def tables_for(tokenizer) -> FractionTables:
    with _lock:
        found = _tables.get(id(tokenizer))
        if found is None:
            found = _tables[id(tokenizer)] = FractionTables(tokenizer)
        return found


class FractionGuard:
    """One sequence's count of the digits after a number's point, fed the tokens its grammar accepts."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._fraction: int | None = None  # digits since a point that followed a digit; None elsewhere
        self._after_digit = False
        self._in_string = False
        self._escaped = False  # inside a string, right after a backslash

    def seen(self, token: int) -> None:
        if self._tokenizer.is_special_token(token):  # a thought's closer, say: JSON starts afresh
            self._fraction, self._after_digit, self._in_string, self._escaped = None, False, False, False
            return
        for byte in self._tokenizer.decode_bytes([token]):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif byte == ord("\\"):
                    self._escaped = True
                elif byte == ord('"'):
                    self._in_string = False
                continue
            if byte == ord('"'):
                self._in_string, self._fraction, self._after_digit = True, None, False
            elif byte in _DIGITS:
                if self._fraction is not None:
                    self._fraction += 1
                self._after_digit = True
            elif byte == ord(".") and self._after_digit:
                self._fraction, self._after_digit = 0, False
            else:
                self._fraction, self._after_digit = None, False

    def narrowed(self, mask: np.ndarray) -> np.ndarray:
        """`mask` ([ceil(vocab / 32)] int32) without the tokens that would write a 17th fraction digit."""
        if self._fraction is None or self._in_string:
            return mask
        tables = tables_for(self._tokenizer)
        left = max(0, MAX_FRACTION_DIGITS - self._fraction)
        if any((int(mask[q // 32]) >> (q % 32)) & 1 for q in tables.quotes):
            return mask  # a quote may come next: a string or free text, not a number
        narrowed = mask & ~tables.too_many[left]
        return narrowed if narrowed.any() else mask
