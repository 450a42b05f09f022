"""Byte-level BPE tokenizer for the demo model, trained on the training corpus.

What it is for: `build_tokenizer(texts)` trains a Qwen2/3-style tokenizer
(same pre-tokenizer regex: digits one by one, words with their leading
space) on rendered training conversations and returns a
`PreTrainedTokenizerFast` that `save_pretrained` writes and `AutoTokenizer`
loads offline.

What it is not for: held-out text. It is trained on the training split only,
so held-out city names and unit words reach the model as pieces it must
copy, not as whole tokens it has memorised.

Why it is shaped so: markers are single ids, as in real Qwen3.
`<|im_start|>`, `<|im_end|>`, `<|endoftext|>` are special (dropped by
`skip_special_tokens`); `<think>`, `</think>`, `<tool_call>`,
`</tool_call>`, `<tool_response>`, `</tool_response>` are added but not
special, so they survive decoding and a reasoning or tool-call parser can
see them. Markers are cut out of the training text so no merge learns them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MARKER_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
EOS, PAD = "<|im_end|>", "<|endoftext|>"
# Qwen2's pre-tokenizer split (contractions, single digits, punctuation runs, newlines, spaces) with
# one change: a word never carries the space or quote before it. "Tallinn" is then the same pieces
# after " in " in the request, in the thinking and after '"city": "' in the call, so putting a
# value into a call is plain copying of ids -- the one skill a few-million-parameter model must
# generalise to names it never saw. (Qwen2's "[^\r\n\p{L}\p{N}]?\p{L}+" gives " T" in text but
# "T" in JSON, so the copy would also have to translate.) Costs about 20% more tokens.
# The four operators likewise are pieces of their own, never glued to a space, a quote or a comma:
# the "*" of "6988 * 38" is then the id the call's '"op": "*"' carries. (Glued, the thought had
# " *" and the call ' "*",' -- a translation between ids, and in 15 of the 32 held-out
# calculations the JSON's operator was not the one the thought had just written.)
PRETOKENIZE_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|\p{L}+|\p{N}|[-+*/]| ?[^\s\p{L}\p{N}+*/-]+[\r\n]*|"
                     r"\s*[\r\n]+|\s+(?!\S)|\s+")
_MARKERS_RE = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS + MARKER_TOKENS))


# A word that appears in fewer texts than this in the tokenizer's corpus is a name (made up, echoed).
# Texts, not occurrences: one conversation repeats its made-up city in the request, the thought, the
# call, the result and the answer -- counted by occurrence, such names passed as common words and
# became whole tokens (hundreds of them, each seen in one conversation).
RARE_WORD_TEXTS = 8


def _without_markers(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        yield from (piece for piece in _MARKERS_RE.split(text) if piece)


def without_names(texts: list[str], names: Iterable[str]) -> list[str]:
    """`texts` with every name cut out: the given `names` (whole words, any case) and words found in
    fewer than RARE_WORD_TEXTS texts.

    Why: merges learnt from the names of the training corpus would give those names long tokens of
    their own and leave a held-out name as odd leftover pieces the model has hardly seen -- it
    then copies training names and garbles held-out ones (measured: every held-out city broke,
    every made-up training city copied). Learnt from the template words only, the merges cut every
    name, trained or held out, into the same kind of common pieces.
    """
    names = {n.lower() for n in names}
    spaced = [n for n in names if " " in n]  # "cape town", "nautical miles": cut before words are seen
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(n) for n in sorted(spaced, key=len, reverse=True))
                         + r")(?!\w)", re.IGNORECASE)
    words = re.compile(r"[^\W\d_]+")
    stripped = [pattern.sub("", text) if spaced else text for text in texts]
    counts: dict[str, int] = {}
    for text in stripped:
        for word in set(words.findall(text)):
            counts[word] = counts.get(word, 0) + 1
    drop = {w for w, c in counts.items() if c < RARE_WORD_TEXTS or w.lower() in names}
    return [words.sub(lambda m: "" if m.group(0) in drop else m.group(0), text) for text in stripped]


def build_tokenizer(texts: Iterable[str], vocab_size: int = 3072, chat_template: str | None = None
                    ) -> PreTrainedTokenizerFast:
    """Train on `texts`; the result has at most `vocab_size` ids (fewer when the texts run out of
    pairs seen twice: the demo corpus without its names has about 1,300)."""
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(MARKER_TOKENS),
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(_without_markers(texts), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKER_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, bos_token=None, unk_token=None,
        model_max_length=4096, clean_up_tokenization_spaces=False, chat_template=chat_template,
    )
    check(fast)
    return fast


def letter_pieces(tokenizer: PreTrainedTokenizerFast) -> list[str]:
    """Every vocabulary entry made of letters only (no leading space), in id order: the pieces
    names are cut into."""
    vocab = tokenizer.get_vocab()
    return [t for t in sorted(vocab, key=vocab.get) if t.isascii() and t.isalpha()]


def check(tokenizer: PreTrainedTokenizerFast) -> None:
    """Raise unless every marker is one id and only the three control tokens are special."""
    for token in SPECIAL_TOKENS + MARKER_TOKENS:
        ids = tokenizer.encode(f"x{token}y", add_special_tokens=False)
        if len(tokenizer.encode(token, add_special_tokens=False)) != 1 or tokenizer.convert_tokens_to_ids(
                token) not in ids:
            raise ValueError(f"{token!r} is not a single id inside running text")
    kept = tokenizer.decode(tokenizer.encode("".join(MARKER_TOKENS) + "<|im_end|>"), skip_special_tokens=True)
    if kept != "".join(MARKER_TOKENS):
        raise ValueError(f"skip_special_tokens should keep the markers and drop <|im_end|>, got {kept!r}")
