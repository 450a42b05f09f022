"""Which generated tokens wrote a turn's answer text, for the Responses API's `output_text` logprobs.

What it is for: `/v1/responses` with `include: ["message.output_text.logprobs"]` gives each
`output_text` the logprobs of the tokens that wrote it -- not those of the thought, of the call
markup or of the end of turn. The engine sends pieces of text with the tokens that wrote them; the
output parser turns each piece into deltas (reasoning, content, calls). This pairs the two.

Why it is shaped so: the parser does not read piece by piece in step. It holds text back (a "<" that
may open a call) and sends it with a later piece, and it drops markup (`</think>`, the newlines after
it) with no delta at all. So the tokens of pieces that made no delta wait; a piece that makes content
gives that content, from the newest token back, as many tokens as its text's length covers, and the
older waiting ones were markup; a piece that makes only thought or call deltas takes the waiting
tokens with it. Every token goes to at most one text, and the tokens a text takes are in order. A
token that ends mid-character writes no text of its own: it goes with the piece that completes it.
"""

from __future__ import annotations

from server.output.tool_calls import ContentDelta


class TextLogprobs:
    def __init__(self) -> None:
        self._waiting: list[tuple[str, list]] = []  # (piece, its tokens' entries) that made no delta yet
        self._unwritten: list = []  # entries of tokens that wrote no text (mid-character), for the next piece

    def feed(self, piece: str, entries: list, deltas: list) -> list[list]:
        """Per delta in `deltas` (what the parser made of `piece`, written by the tokens `entries`), the
        entries its text takes: the first content delta takes them all, every other delta none."""
        if not piece:
            self._unwritten += entries
        else:
            self._waiting.append((piece, [*self._unwritten, *entries]))
            self._unwritten = []
        shares: list[list] = [[] for _ in deltas]
        texts = [i for i, d in enumerate(deltas) if isinstance(d, ContentDelta)]
        if texts:
            covered, taken = sum(len(deltas[i].text) for i in texts), []
            while self._waiting and covered > 0:
                written, mine = self._waiting.pop()
                taken[:0] = mine
                covered -= len(written)
            shares[texts[0]] = taken
            self._waiting = []
        elif deltas:
            self._waiting = []
        return shares
