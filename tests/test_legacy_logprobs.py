"""Legacy /v1/completions logprobs: token names are dict keys, so they must not collide.

Tokens whose bytes are not whole UTF-8 characters all decode to U+FFFD; named by
their bytes (`bytes:\\xNN`, as OpenAI names them) they stay apart, and the
sampled token's entry carries its own logprob.
"""

from __future__ import annotations

from types import SimpleNamespace

from scheduler.request_stream import TokenLogprob
from server.generation import completion_logprobs

# id -> bytes: two halves of emoji (not UTF-8 alone), a word, and two ids that decode alike.
BYTES = {1: b"\xf0\x9f", 2: b"\x98\x8a", 3: b"hi", 4: b" a", 5: b" a"}


class _Tokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return b"".join(BYTES[i] for i in ids).decode("utf-8", errors="replace")


STATE = SimpleNamespace(tokenizer=_Tokenizer(), token_bytes=lambda t: BYTES[t])


def test_partial_utf8_tokens_are_named_by_their_bytes_and_do_not_overwrite_each_other():
    entry = TokenLogprob(1, -0.5, [(1, -0.5), (2, -1.5), (3, -2.0)])
    out = completion_logprobs(STATE, [entry])
    assert out["tokens"] == ["bytes:\\xf0\\x9f"]
    assert out["token_logprobs"] == [-0.5]
    assert out["top_logprobs"] == [{"bytes:\\xf0\\x9f": -0.5, "bytes:\\x98\\x8a": -1.5, "hi": -2.0}]


def test_two_ids_with_one_name_keep_the_higher_logprob():
    entry = TokenLogprob(4, -0.2, [(4, -0.2), (5, -3.0)])
    assert completion_logprobs(STATE, [entry])["top_logprobs"] == [{" a": -0.2}]


def test_text_offsets_still_count_the_decoded_text():
    out = completion_logprobs(STATE, [TokenLogprob(3, -0.1), TokenLogprob(1, -0.1), TokenLogprob(4, -0.1)], 10)
    assert out["text_offset"] == [10, 12, 13]


def test_the_sampled_token_is_always_among_the_top_logprobs_as_openai_promises():
    # logprobs 0: no alternatives, the sampled token alone; a sampled token outside the top k joins them.
    out = completion_logprobs(STATE, [TokenLogprob(3, -0.1), TokenLogprob(4, -4.0, [(3, -0.5), (1, -1.0)])])
    assert out["top_logprobs"] == [{"hi": -0.1}, {"hi": -0.5, "bytes:\\xf0\\x9f": -1.0, " a": -4.0}]
