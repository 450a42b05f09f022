"""A prompt is refused from its length alone only when no tokenization could fit it in the context."""

from __future__ import annotations

import random

import pytest
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from server.errors import ExceedContextSizeError
from server.prompt_size import SLACK, longest_piece_bytes, refuse_surely_too_long
from server.runtime import demo_model_dir


@pytest.fixture(scope="module", params=["qwen3", "gemma3", "demo"])
def tokenizer(request, tiny_checkpoint):
    folder = demo_model_dir() if request.param == "demo" else tiny_checkpoint(request.param)
    return AutoTokenizer.from_pretrained(folder)


def _texts() -> list[str]:
    rng = random.Random(0)
    jamo = "".join(chr(0x1100 + rng.randrange(19)) + chr(0x1161 + rng.randrange(21)) + chr(0x11A8 + rng.randrange(27))
                   for _ in range(300))  # NFC composes each three into one syllable
    return [" " * 5000, "\n" * 3000, "a" * 4000, "e\u0301" * 2000, jamo, "😀" * 1000, "<|im_start|>" * 300,
            " ".join(rng.choice(["the", "cat", "sat", "on", "a", "mat"]) for _ in range(2000))]


def test_no_text_has_fewer_tokens_than_the_bound_says(tokenizer):
    longest = longest_piece_bytes(tokenizer)
    assert longest is not None and longest > 0
    for text in _texts():
        assert len(tokenizer.encode(text, add_special_tokens=False)) >= len(text) // (SLACK * longest), text[:20]


def test_a_text_past_the_bound_is_refused_with_the_bound_and_one_within_it_is_not():
    refuse_surely_too_long("x" * (SLACK * 10 * 100 - 1), 10, 100, "prompt")  # might fit: counted as before
    with pytest.raises(ExceedContextSizeError) as caught:
        refuse_surely_too_long("x" * (SLACK * 10 * 100), 10, 100, "prompt")
    body = caught.value.body()["error"]
    assert body["param"] == "prompt" and body["code"] == "context_length_exceeded"
    assert "at least 100 tokens" in body["message"] and body["n_prompt_tokens"] == 100


def _bpe(normalizer=None, added: AddedToken | None = None, **options) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE({"<unk>": 0, "a": 1, "b": 2, "\n": 3, "▁": 4}, [], **options))
    if normalizer is not None:
        backend.normalizer = normalizer
    if added is not None:
        backend.add_special_tokens([added])
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_a_bpe_that_spells_each_unknown_character_apart_has_a_bound_that_holds():
    tokenizer = _bpe(normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]),
                     unk_token="<unk>")
    longest = longest_piece_bytes(tokenizer)
    assert longest == len("<unk>")
    for text in ("z" * 20_000, " " * 20_000, "a\nb" * 5000):
        assert len(tokenizer.encode(text, add_special_tokens=False)) >= len(text) // (SLACK * longest)


@pytest.mark.parametrize("tokenizer, text", [
    # A normalizer that collapses whitespace shrinks text without bound.
    (lambda: _bpe(normalizers.Replace(Regex(r"\s+"), " "), unk_token="<unk>"), " " * 20_000),
    # Unknown characters fused into one token, a run of any length.
    (lambda: _bpe(normalizers.NFC(), unk_token="<unk>", fuse_unk=True), "z" * 20_000),
    # An added token that strips the whitespace after it (Phi-3's <|assistant|>) swallows a run of any length.
    (lambda: _bpe(unk_token="<unk>", added=AddedToken("<|assistant|>", rstrip=True, special=True)),
     "<|assistant|>" + "\n" * 20_000),
    # No way to spell an unknown character: the BPE drops it.
    (lambda: _bpe(), "z" * 20_000),
], ids=["collapsing whitespace", "fused unknowns", "an added token stripping whitespace", "no unknown token"])
def test_a_tokenizer_where_one_token_may_cover_text_of_any_length_has_no_bound(tokenizer, text):
    tokenizer = tokenizer()
    assert len(tokenizer.encode(text, add_special_tokens=False)) < 10  # why there can be no bound
    assert longest_piece_bytes(tokenizer) is None


def test_a_word_level_tokenizer_takes_a_whole_unknown_word_as_one_token_so_has_no_bound():
    backend = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.normalizer = normalizers.NFC()
    assert longest_piece_bytes(PreTrainedTokenizerFast(tokenizer_object=backend)) is None
