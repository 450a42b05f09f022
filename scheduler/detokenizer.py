"""Incremental detokenizer: token ids in, text deltas out, never half a character.

Decoding one token at a time is wrong twice over: byte-level tokens can carry
part of a UTF-8 character (decoded alone it is U+FFFD), and SentencePiece
tokenizers drop a word's leading space when a decode starts at that word. So
we decode a short window -- a few tokens of context before the unread ones --
and emit only what the window adds beyond its context, holding text back while
it ends in U+FFFD (an unfinished character). This is vLLM's offsets scheme.

Special tokens are kept in the text (`<tool_call>`, `<|python_tag|>`): the
output parsers need them -- except the `hidden` ones (control tokens such as
`<|im_end|>`, server/hidden_tokens.py says which), which add no text and are
no decode's context. Terminal tokens (EOS, stop ids) are never fed here.
"""

from __future__ import annotations

_CONTEXT = 5  # tokens of context before the unread ones


class IncrementalDetokenizer:
    def __init__(self, tokenizer, prompt_ids: list[int], hidden: frozenset[int] = frozenset()):
        self._decode = tokenizer.decode
        self.hidden = hidden
        tail = [t for t in prompt_ids if t not in hidden][-_CONTEXT:]
        self.ids: list[int] = tail
        self.prefix_offset = 0
        self.read_offset = len(tail)

    def _text(self, ids: list[int]) -> str:
        return self._decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def add(self, token_id: int) -> str:
        """Feed one token; returns the text it completes (possibly empty)."""
        if token_id in self.hidden:
            return ""
        self.ids.append(token_id)
        prefix = self._text(self.ids[self.prefix_offset:self.read_offset])
        full = self._text(self.ids[self.prefix_offset:])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix):]
            # The tokens just read become the next decode's context.
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return delta
        return ""

    def flush(self) -> str:
        """Whatever is held back (a character the generation never finished)."""
        prefix = self._text(self.ids[self.prefix_offset:self.read_offset])
        full = self._text(self.ids[self.prefix_offset:])
        self.prefix_offset = self.read_offset = len(self.ids)
        return full[len(prefix):] if len(full) > len(prefix) else ""
