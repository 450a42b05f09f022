"""A 3-turn agent loop with the openai SDK against the demo model: anchors on against anchors off.

The harness is the kind agents use: it passes the assistant's reasoning back
(`reasoning_content`), runs the tools for real (models/demo/tools.py) and
keeps each call's arguments as sorted-key JSON (a common way to store or
de-duplicate calls). The chat template re-renders arguments in the order it
is given, so the next prompt agrees with the model's own tokens up to the
first argument out of order -- a few tokens after `<tool_call>` -- and
diverges there: the rejoin point the tool-call anchor exists for.

The loop's shape must not depend on how well the toy model reasons (the
calls and their arguments are its own): the two calling turns must call a
tool (tool_choice "required"),
and a reasoning budget caps each thought. Pages of 4 tokens and a slide
every 2 steps keep what the window leaves live at a turn's end close to the
96-token window itself.

Claims:
- with anchors on, each turn's `cached_tokens` reaches the page holding the
  previous turn's `<tool_call>` token (up to where the prompt diverges);
- with anchors off, each turn falls back to the previous turn's prompt: each
  calling turn generates more than the 96-token window before the point
  where the next prompt diverges (the request asks for step-by-step
  reasoning, which buys the first turn a numbered thought), so its thought
  slid out of the window while its call was written, and only the anchor
  holds the window before the call;
- every turn's output is the same either way: reuse never changes tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI

from live_server import live_server
from models.demo.tools import execute

pytestmark = pytest.mark.slow

CHECKPOINT = Path(__file__).resolve().parents[1] / "models" / "demo" / "checkpoint"
TOOLS = json.loads((Path(__file__).resolve().parents[1] / "configs" / "demo_tools.json").read_text())
PAGE = 4
THOUGHT_CAP = 400  # a reasoning budget per calling turn: a cap, well above the thoughts this request gets
# Two calls in sequence, then an answer: three turns. Phrased the way training requests are (a
# training template and a training step-by-step suffix, which buys numbered thoughts that run past the
# 96-token window): this test is about the cache, not about how far the toy model generalises.
REQUEST = "Add 12 and 30, then multiply the result by 2. Think it through step by step."


def _server(anchors: bool):
    # The budget message "\n" ends a thought the server closes the way the model ends one, so the
    # template's re-rendering of the reasoning_content the harness passes back is the same tokens.
    return live_server(CHECKPOINT, anchors=anchors, page_size=PAGE, swa_eviction_interval=2,
                       kv_cache_tokens=8192, max_model_len=2048, served_model_name="anchorage-demo",
                       reasoning_budget_message="\n")


def _sorted_keys(arguments: str) -> str:
    """The arguments as sorted-key JSON; text that is not JSON passes through."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except json.JSONDecodeError:
        return arguments


def _agent_loop(server) -> list[dict]:
    """Run three turns; per turn: prompt and cached tokens, token ids, finish reason, message."""
    client = OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600)
    messages: list[dict] = [{"role": "user", "content": REQUEST}]
    turns = []
    for turn in range(3):
        forced = turn < 2
        r = client.chat.completions.create(
            model="anchorage-demo", messages=messages, tools=TOOLS, temperature=0,
            max_tokens=600,
            tool_choice="required" if forced else "auto",
            extra_body={"return_token_ids": True, **({"reasoning_budget_tokens": THOUGHT_CAP} if forced else {})})
        choice, extra = r.choices[0], r.model_extra
        turns.append({"prompt_tokens": r.usage.prompt_tokens,
                      "cached_tokens": r.usage.prompt_tokens_details.cached_tokens,
                      "prompt_token_ids": extra["prompt_token_ids"], "token_ids": choice.model_extra["token_ids"],
                      "finish_reason": choice.finish_reason, "message": choice.message})
        message = choice.message
        if not message.tool_calls:
            break
        calls = [{"id": c.id, "type": "function",
                  "function": {"name": c.function.name, "arguments": _sorted_keys(c.function.arguments)}}
                 for c in message.tool_calls]
        messages.append({"role": "assistant", "content": message.content or "",
                         "reasoning_content": message.model_extra.get("reasoning_content") or "",
                         "tool_calls": calls})
        for call in message.tool_calls:
            result = execute(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return turns


@pytest.fixture(scope="module")
def loops():
    with _server(anchors=True) as on:
        anchored = _agent_loop(on)
        opener = on.token_id("<tool_call>")
    with _server(anchors=False) as off:
        plain = _agent_loop(off)
    return anchored, plain, opener


def _anchor(turn: dict, opener: int) -> int:
    """Absolute position of the turn's first <tool_call> token."""
    return turn["prompt_tokens"] + turn["token_ids"].index(opener)


def test_the_loop_runs_three_turns_to_an_end(loops):
    anchored, _, _ = loops
    assert len(anchored) == 3 and all(t["message"].tool_calls for t in anchored[:2])
    # The third turn is the toy model's own (tool_choice "auto"): it may answer, or call again -- with
    # the server's tool-call grammar such a call parses -- and the harness stops after three turns.
    third = anchored[2]
    assert third["token_ids"] and (third["message"].content or third["message"].tool_calls)


def _divergence(previous: dict, turn: dict) -> int:
    """First position where the turn's prompt differs from the previous turn's prompt + output."""
    before = previous["prompt_token_ids"] + previous["token_ids"]
    now = turn["prompt_token_ids"]
    return next((k for k, (a, b) in enumerate(zip(before, now)) if a != b), min(len(before), len(now)))


def test_with_anchors_each_turn_reuses_the_prefix_up_to_the_previous_turns_tool_call(loops):
    anchored, _, opener = loops
    for previous, turn in zip(anchored, anchored[1:]):
        anchor = _anchor(previous, opener)
        # The harness agrees with the model through the opener and a little beyond (the arguments).
        assert _divergence(previous, turn) > anchor
        assert turn["cached_tokens"] >= anchor - anchor % PAGE, (turn["cached_tokens"], anchor)


def test_without_anchors_each_turn_recomputes_the_previous_turns_thought(loops):
    anchored, plain, opener = loops
    assert len(plain) == len(anchored) == 3
    for turn in (1, 2):
        previous = anchored[turn - 1]
        thought = _anchor(previous, opener) - previous["prompt_tokens"]
        assert plain[turn]["cached_tokens"] <= anchored[turn]["cached_tokens"] - thought // 2, (
            turn, plain[turn]["cached_tokens"], anchored[turn]["cached_tokens"], thought)
        assert plain[turn]["cached_tokens"] <= previous["prompt_tokens"]
    for on, off in zip(anchored, plain):
        assert off["cached_tokens"] <= on["cached_tokens"]


def test_reuse_never_changes_a_token(loops):
    anchored, plain, _ = loops
    assert [t["token_ids"] for t in anchored] == [t["token_ids"] for t in plain]
