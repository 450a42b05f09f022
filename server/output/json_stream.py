"""An incremental JSON scanner that re-serialises as it reads.

Tool-call arguments stream to the client while the model is still writing
them, yet must come out as the SAME string the non-streaming parse returns:
`json.dumps(value, ensure_ascii=False)` of the parsed value (separators
", " and ": ", which is also what chat templates' `tojson` writes, so a
re-rendered turn reproduces the model's own tokens). `JsonScanner` reads one
JSON value a piece at a time and emits canonical text as soon as it is
certain: punctuation at once, string contents as they arrive, numbers and
literals when they end. It also knows, at every character, whether the text
so far can still be valid JSON, so a call that turns out not to be JSON is
caught as early as possible.

It accepts exactly what `json.loads(strict=False)` accepts (raw control
characters inside strings are allowed: models write code with real
newlines), minus NaN/Infinity and non-finite numbers, which have no valid
JSON serialisation. `canonical_json(value)` is the whole-text counterpart.
Duplicate keys are kept here but collapsed by `json.loads`: the one known
difference, left alone because no model emits them on purpose.

Not for: deciding what a tool call is (call_json.py) or where it starts.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

JSON_WS = " \t\n\r"
_PLAIN = re.compile(r'[^"\\]+')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_text(text: str) -> str:
    """JSON string body of `text` as json.dumps(ensure_ascii=False) writes it.

    Lone surrogates (a model's broken `\\ud83d`) are written as escapes, so
    the result is always encodable as UTF-8.
    """
    body = json.dumps(text, ensure_ascii=False)[1:-1]
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", body)


def canonical_json(value: Any) -> str:
    """The whole-value counterpart of what `JsonScanner` emits."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# The decoder every whole-text parser uses, so both paths accept one language.
DECODER = json.JSONDecoder(strict=False, parse_float=_finite_float, parse_constant=_no_constants)


def _canonical_number(token: str) -> str | None:
    if not _NUMBER.fullmatch(token):
        return None
    try:
        value = DECODER.decode(token)
    except ValueError:
        return None
    return json.dumps(value)


class JsonScanner:
    """Reads one JSON value incrementally; see the module docstring.

    `feed(text)` consumes characters until the value is complete or invalid
    and returns how many it consumed; the rest belongs to the caller.
    `events` (drained by `take_events`) are `(kind, payload)` pairs:
    `("open", "{" | "[")`, `("close", "}" | "]")`, `("key", str)`,
    `("comma", None)`, `("str_open", None)`, `("str", text)`,
    `("str_close", None)`, `("scalar", canonical text)`.
    """

    def __init__(self) -> None:
        self.stack: list[str] = []  # "{" / "[" of open containers
        self.done = False
        self.error: str | None = None
        self.events: list[tuple[str, Any]] = []
        self._expect = "value"  # value | value_or_close | key | key_or_close | colon | comma_or_close
        self._token: str | None = None  # number or literal being read
        self._string: list[str] | None = None  # decoded chars of an open string
        self._is_key = False
        self._escape: str | None = None  # "" after a backslash, hex digits after \u
        self._high: str | None = None  # a high surrogate waiting for its pair

    def take_events(self) -> list[tuple[str, Any]]:
        events, self.events = self.events, []
        return events

    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n and not self.done and self.error is None:
            if self._string is not None:
                i = self._in_string(text, i)
                continue
            ch = text[i]
            if self._token is not None:
                if self._continue_token(ch):
                    i += 1
                continue  # a finished token leaves `ch` for the structure
            if ch in JSON_WS:
                i += 1
                continue
            self._structural(ch)
            if self.error is None:
                i += 1
        return i

    def pending(self) -> str:
        """Text of what was read but has produced no event yet: an open key (canonical: keys are emitted
        whole) or a number or literal still being read (as written: it cannot be canonical before it
        ends). A value string's text is streamed as it comes: only an escape or half a surrogate pair may
        wait, and is given as written."""
        if self._string is not None and self._is_key:
            return '"' + escape_text("".join(self._string)) + self._open_escape()
        if self._string is not None:
            return self._open_escape()
        return self._token or ""

    def _open_escape(self) -> str:
        """An escape begun but not ended (`\\`, `\\u12`), and a high surrogate waiting for its pair, as written."""
        high = f"\\u{ord(self._high):04x}" if self._high is not None else ""
        return high + ("\\" + self._escape if self._escape is not None else "")

    def finish(self) -> None:
        """End of input: a top-level number ends here; anything open is an error."""
        if self._token is not None and not self.stack and self._token[0] not in _LITERALS:
            self._end_number()
        if not self.done and self.error is None:
            self.error = "the JSON value is incomplete"

    # -- structure -------------------------------------------------------------

    def _structural(self, ch: str) -> None:
        expect = self._expect
        if expect in ("value", "value_or_close"):
            if ch == "]" and expect == "value_or_close":
                self._close(ch)
            elif ch in "{[":
                self.stack.append(ch)
                self.events.append(("open", ch))
                self._expect = "key_or_close" if ch == "{" else "value_or_close"
            elif ch == '"':
                self._open_string(is_key=False)
            elif ch == "-" or ch.isdigit() and ch.isascii():
                self._token = ch
            elif ch in _LITERALS:
                self._token = ch
            else:
                self.error = f"unexpected {ch!r} where a JSON value should start"
        elif expect in ("key", "key_or_close"):
            if ch == '"':
                self._open_string(is_key=True)
            elif ch == "}" and expect == "key_or_close":
                self._close(ch)
            else:
                self.error = f"unexpected {ch!r} where an object key should start"
        elif expect == "colon":
            if ch == ":":
                self._expect = "value"
            else:
                self.error = f"expected ':' after an object key, got {ch!r}"
        else:  # comma_or_close
            top = self.stack[-1]
            if ch == ",":
                self.events.append(("comma", None))
                self._expect = "key" if top == "{" else "value"
            elif ch == ("}" if top == "{" else "]"):
                self._close(ch)
            else:
                self.error = f"expected ',' or the end of the {'object' if top == '{' else 'array'}, got {ch!r}"

    def _close(self, ch: str) -> None:
        self.stack.pop()
        self.events.append(("close", ch))
        self._value_ended()

    def _value_ended(self) -> None:
        if self.stack:
            self._expect = "comma_or_close"
        else:
            self.done = True

    # -- numbers and literals --------------------------------------------------

    def _continue_token(self, ch: str) -> bool:
        """Extend the token with `ch` (True) or end it and leave `ch` (False)."""
        token = self._token
        assert token is not None
        if token[0] in _LITERALS:
            word = _LITERALS[token[0]]
            if ch != word[len(token)]:
                self.error = f"invalid literal {token + ch!r}"
                return False
            token += ch
            if token == word:
                self._token = None
                self.events.append(("scalar", word))
                self._value_ended()
            else:
                self._token = token
            return True
        if ch in _NUMBER_CHARS:
            self._token = token + ch
            return True
        self._end_number()
        return False

    def _end_number(self) -> None:
        token = self._token
        canonical = _canonical_number(token or "")
        if canonical is None:
            self.error = f"invalid number {token!r}"  # the token stays: pending() gives it as written
            return
        self._token = None
        self.events.append(("scalar", canonical))
        self._value_ended()

    # -- strings ---------------------------------------------------------------

    def _open_string(self, is_key: bool) -> None:
        self._string, self._is_key = [], is_key
        if not is_key:
            self.events.append(("str_open", None))

    def _in_string(self, text: str, i: int) -> int:
        buf = self._string
        assert buf is not None
        n = len(text)
        while i < n and self.error is None:
            if self._escape is not None:
                i = self._in_escape(text, i)
                continue
            plain = _PLAIN.match(text, i)
            if plain:
                self._flush_high(buf)
                buf.append(plain.group())
                i = plain.end()
                continue
            ch = text[i]
            i += 1
            if ch == "\\":
                self._escape = ""
            else:  # the closing quote
                self._flush_high(buf)
                self._string = None
                if self._is_key:
                    self.events.append(("key", "".join(buf)))
                    self._expect = "colon"
                else:
                    if buf:
                        self.events.append(("str", "".join(buf)))
                    self.events.append(("str_close", None))
                    self._value_ended()
                return i
        if not self._is_key and buf:
            # Stream what we have; keys are emitted whole. (A high surrogate waiting for its pair is not in
            # `buf` but in `_high`, after it: the text before it need not wait.)
            self.events.append(("str", "".join(buf)))
            buf.clear()
        return i

    def _in_escape(self, text: str, i: int) -> int:
        buf = self._string
        assert buf is not None and self._escape is not None
        ch = text[i]
        if self._escape == "":
            if ch == "u":
                self._escape = "u"
            elif ch in _ESCAPES:
                self._escape = None
                self._flush_high(buf)
                buf.append(_ESCAPES[ch])
            else:
                self.error = f"invalid escape '\\{ch}'"
                return i
            return i + 1
        if ch not in "0123456789abcdefABCDEF":
            self.error = f"invalid \\u escape '\\{self._escape}{ch}'"
            return i
        self._escape += ch
        if len(self._escape) == 5:  # "u" + four hex digits
            code = int(self._escape[1:], 16)
            self._escape = None
            if 0xDC00 <= code <= 0xDFFF and self._high is not None:
                high, self._high = self._high, None
                buf.append(chr(0x10000 + ((ord(high) - 0xD800) << 10) + (code - 0xDC00)))
            else:
                self._flush_high(buf)
                if 0xD800 <= code <= 0xDBFF:
                    self._high = chr(code)  # may pair with the next escape
                else:
                    buf.append(chr(code))
        return i + 1

    def _flush_high(self, buf: list[str]) -> None:
        if self._high is not None:
            buf.append(self._high)
            self._high = None


def canonical_piece(kind: str, payload: Any) -> str:
    """The canonical text one scanner event contributes."""
    if kind in ("open", "close"):
        return payload
    if kind == "key":
        return f'"{escape_text(payload)}": '
    if kind == "comma":
        return ", "
    if kind in ("str_open", "str_close"):
        return '"'
    if kind == "str":
        return escape_text(payload)
    return payload  # scalar
