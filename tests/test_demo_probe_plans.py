"""The plan probe replays training-distribution plans up to their second calling turn."""

from __future__ import annotations

import json

from models.demo.probe_plans import second_turns


def test_a_probed_plan_stops_after_its_first_results_and_expects_the_corpus_second_call():
    cases = second_turns(seed=7, conversations=600, limit=20)
    assert {kind for kind, _, _ in cases} == {"wdiff", "chain"}
    for kind, messages, want in cases:
        first = [m for m in messages if m.get("tool_calls")][-1]
        assert first["role"] == "assistant" and first["tool_calls"] and first["reasoning_content"]
        assert messages[-1]["role"] == "tool" and [c.name for c in want] == ["calculate"]
        result = json.loads(messages[-1]["content"])
        if kind == "chain":  # the second step works on the first result
            assert want[0].arguments["a"] == result["result"]
        else:  # c1 minus c2, the two temperatures just returned
            assert want[0].arguments["b"] == result["temperature_c"]
