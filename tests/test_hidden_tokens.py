"""Control tokens add no text to a generation; the markers its readers need stay.

A sampled `<|im_end|>` (under ignore_eos, or a logit_bias) reaches no client
as markup, as vLLM (`skip_special_tokens`) and llama.cpp do it, unless the
request asks for it with `skip_special_tokens: false`; the special tokens a
family's call or thought reader looks for (`<|python_tag|>`, `[TOOL_CALLS]`)
and a harmony model's channel markers stay in the text.
"""

from __future__ import annotations

import json

import httpx
import pytest
from transformers import AutoTokenizer

from live_server import live_server
from models.family_table import ReasoningFormat, load_family_table
from scheduler.detokenizer import IncrementalDetokenizer
from server.hidden_tokens import hidden_special_ids

THINK = ReasoningFormat("qwen3", "<think>", "</think>", "markers")


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        yield s


def _forced(server, **fields) -> dict:
    end = server.token_id("<|im_end|>")
    r = httpx.post(server.v1 + "/completions", timeout=60, json={
        "prompt": "hi", "max_tokens": 4, "ignore_eos": True, "logit_bias": {str(end): 100}, "return_token_ids": True,
        **fields})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_a_sampled_end_of_turn_token_adds_no_text_but_is_counted(server):
    choice = _forced(server)
    assert choice["text"] == "" and choice["token_ids"] == [server.token_id("<|im_end|>")] * 4


def test_skip_special_tokens_false_keeps_their_text(server):
    assert _forced(server, skip_special_tokens=False)["text"] == "<|im_end|>" * 4


def test_streamed_the_control_tokens_are_left_out_alike(server):
    end = server.token_id("<|im_end|>")
    with httpx.stream("POST", server.v1 + "/completions", timeout=60, json={
            "prompt": "hi", "max_tokens": 4, "ignore_eos": True, "logit_bias": {str(end): 100}, "stream": True}) as r:
        body = r.read().decode()
    assert "im_end" not in body and body.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize("family, kept, hidden", [
    ("qwen3", [], ["<|im_end|>", "<|im_start|>", "<|endoftext|>"]),
    ("llama3", ["<|python_tag|>"], ["<|eot_id|>", "<|start_header_id|>"]),
    ("mistral", ["[TOOL_CALLS]"], ["[INST]", "</s>"]),
])
def test_the_markers_a_familys_readers_need_stay_and_control_tokens_go(tiny_checkpoint, family, kept, hidden):
    folder = tiny_checkpoint(family)
    # The call format as the server finds it: the family table's entry for the checkpoint's model_type.
    model_type = json.loads((folder / "config.json").read_text())["model_type"]
    call_format = load_family_table().family(model_type).tool_call_format
    tokenizer = AutoTokenizer.from_pretrained(folder)
    names = set(tokenizer.convert_ids_to_tokens(sorted(hidden_special_ids(tokenizer, THINK, call_format))))
    assert set(hidden) <= names and not set(kept) & names, names


def test_a_harmony_model_keeps_every_marker_its_text_passes_through_with(tiny_checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3", template="harmony"))
    channels = ReasoningFormat("harmony", None, None, "channel")
    assert hidden_special_ids(tokenizer, channels, "hermes") == frozenset()


def test_a_hidden_token_is_no_decode_context_either(tiny_checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3"))
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    words = tokenizer.encode(" hello world", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [end], frozenset({end}))
    text = detok.add(words[0]) + detok.add(end) + "".join(detok.add(t) for t in words[1:]) + detok.flush()
    assert text == " hello world"
