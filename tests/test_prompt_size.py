"""A prompt is refused from its length alone only when no tokenization could fit it in the context."""

from __future__ import annotations

import random

import pytest
from tokenizers import Regex, Tokenizer, models, normalizers
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


def test_a_tokenizer_whose_normalizer_may_shrink_text_without_bound_has_no_bound():
    backend = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\s+"), " ")])
    assert longest_piece_bytes(PreTrainedTokenizerFast(tokenizer_object=backend)) is None
    backend.normalizer = normalizers.NFC()
    assert longest_piece_bytes(PreTrainedTokenizerFast(tokenizer_object=backend)) == len("[UNK]")
