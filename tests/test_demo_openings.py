"""Thought openings for the demo training (models/demo/openings.py): where a conversation is cut, what is
trained, and how the schedule places their batches (models/demo/train.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from models.demo import corpus, dataset, openings, train
from models.demo.dataset import IGNORE

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "<|im_start|>user\nWeather in Oslo?<|im_end|>\n" + openings.GENERATION_PROMPT


def _spanned(thought_and_rest: str) -> tuple[str, list[tuple[int, int]]]:
    text = PROMPT + thought_and_rest
    return text, [(len(PROMPT), len(text))]


def test_an_opening_ends_after_the_thoughts_second_sentence_and_trains_only_those_sentences():
    text, spans = _spanned('The user wants the weather in Oslo. I\'ll call get_weather with {"city": "Oslo"}. '
                           'Nothing else is asked.\n</think>\n\n<tool_call>...</tool_call><|im_end|>')
    cut, trained = openings.opening(text, spans)
    assert cut == PROMPT + 'The user wants the weather in Oslo. I\'ll call get_weather with {"city": "Oslo"}. '
    assert trained == [(len(PROMPT), len(cut))]


def test_a_decimal_point_does_not_end_a_sentence():
    text, spans = _spanned("The user wants 254.8 - 25. I'll call calculate.\n</think>\n\n<tool_call>")
    cut, _ = openings.opening(text, spans)
    assert cut.endswith("The user wants 254.8 - 25. I'll call calculate.\n")


def test_a_one_sentence_thought_is_cut_after_its_newline_before_the_closer():
    text, spans = _spanned("The user is saying goodbye.\n</think>\n\nBye!<|im_end|>")
    cut, _ = openings.opening(text, spans)
    assert cut == PROMPT + "The user is saying goodbye.\n"


def test_a_turn_after_a_tool_result_or_without_a_thought_has_no_opening():
    after_result = ("<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n" + openings.GENERATION_PROMPT
                    + "It is 12°C.\n</think>\n\nIt's 12°C.<|im_end|>")
    start = after_result.index("It is")
    assert openings.opening(after_result, [(start, len(after_result))]) is None
    no_thought = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHi!<|im_end|>"
    assert openings.opening(no_thought, [(no_thought.index("Hi!"), len(no_thought))]) is None
    assert openings.opening("anything", []) is None


def test_an_openings_ids_are_the_first_ids_of_its_whole_conversation():
    tok = AutoTokenizer.from_pretrained(ROOT / "models/demo/checkpoint")
    done = [dataset.rendered(c) for c in corpus.training_conversations(0, 200)]
    examples = dataset.encode_all(done, tok)
    kept = openings.openings(done, examples, tok)
    wholes = [e for (text, spans), e in zip(done, examples) if openings.opening(text, spans)]
    assert len(wholes) > 100 and len(kept) == len(wholes)  # the cut never splits a token on this corpus
    for o, whole in zip(kept, wholes):
        assert o.prefix == whole.prefix and whole.ids[:len(o.ids)] == o.ids
        trained = [i for i, label in enumerate(o.labels) if label != IGNORE]
        # Trained: the tail of the row (the thought's opening), labelled as the whole conversation labels it.
        assert trained and trained == list(range(trained[0], len(o.ids)))
        assert [whole.labels[i] for i in trained] == [o.labels[i] for i in trained]


def test_the_plan_puts_an_openings_batch_after_every_second_agent_step_when_asked():
    plan = train._agent_plan({**train.DEFAULTS, "drill_every": 0, "opening_every": 2}, drill_from=0, steps=6)
    assert plan == [("agent", 0), ("agent", 1), ("opening", 0), ("agent", 2), ("agent", 3), ("opening", 1),
                    ("agent", 4), ("agent", 5)]


def test_openings_take_their_cost_out_of_the_agent_steps_so_the_run_costs_the_same_budget():
    cfg = {**train.DEFAULTS, "budget": 3000, "drill_cost": 0.5, "opening_every": 2, "opening_cost": 1.0}
    steps = train.agent_steps(cfg, 200)
    assert steps == 1933
    assert steps + 1.0 * steps / 2 + 0.5 * 200 == pytest.approx(3000, abs=1)
    assert train.agent_steps({**cfg, "opening_every": 0}, 200) == 2900
