"""Stop strings matched on the text stream, across token boundaries.

A stop string can end in the middle of a token and start tokens earlier, so
matching happens on text, not ids. Text that could still be the beginning of a
stop string is held back until it is disambiguated; when a stop string
appears, everything from its first character on is discarded (OpenAI and
vLLM exclude it from the output) and the sequence finishes with "stop".
"""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self.pending = ""
        self.matched: str | None = None  # the stop string that ended the text (the earliest in it), once one has
        self._quiet = 0  # characters at the start of `pending` fed under min_tokens: no stop string ends in them

    def feed(self, text: str, match: bool = True) -> tuple[str, bool]:
        """Returns (text safe to emit now, whether a stop string was hit). With `match` false (the tokens
        under min_tokens) no stop string ends here, but the text that may begin one is still held back, so
        a stop string that begins in those tokens and ends after them is found (vLLM's look-back)."""
        if not self.stops:
            return text, False
        self.pending += text
        # A hit must end past the quiet characters: searching from `quiet - len(s) + 1` on finds only those.
        found = ((s, self.pending.find(s, max(0, self._quiet - len(s) + 1))) for s in self.stops) if match else ()
        hits = [(i, s) for s, i in found if i >= 0]
        if hits:
            cut, self.matched = min(hits, key=lambda hit: hit[0])
            out, self.pending, self._quiet = self.pending[:cut], "", 0
            return out, True
        hold = 0
        for s in self.stops:
            # Longest suffix of pending that is a proper prefix of s.
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        out = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(self.pending) - hold:]
        self._quiet = len(self.pending) if not match else max(0, self._quiet - len(out))
        return out, False

    def flush(self) -> str:
        out, self.pending, self._quiet = self.pending, "", 0
        return out
