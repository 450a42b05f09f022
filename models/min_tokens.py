"""vLLM's `min_tokens`: the turn may not end before this many tokens are generated.

What it is for: one sequence's processor that bans its end tokens -- the
checkpoint's EOS ids (unless `ignore_eos`) and the request's `stop_token_ids`
-- until `min_tokens` tokens have been sampled; then it stands aside. Stop
strings are not matched in those tokens either (scheduler/engine.py), as vLLM
skips its stop checks until the output is that long.

Why it is a processor: it must see every sampled token, forced ones included
(the sampler hands each processor each token it takes), to count them. No
torch: it names token ids and the sampler masks them.
"""

from __future__ import annotations


class MinTokens:
    def __init__(self, end_ids: tuple[int, ...], min_tokens: int) -> None:
        self.end_ids, self.left = list(end_ids), min_tokens

    def forced_token(self) -> None:
        return None

    def banned_tokens(self) -> list[int]:
        """Ids the next token may not be."""
        return self.end_ids if self.left > 0 else []

    def accept(self, token: int) -> None:
        self.left -= 1
