"""The demo's 3-turn agent loop through Anthropic's Messages API and SDK: anchors on against anchors off.

The loop of test_demo_agent_loop.py, with an Anthropic client as the
harness: it passes each assistant turn back as the blocks it got (the
`thinking` block, `tool_use` blocks) and the tools' results as `tool_result`
blocks; the server renders them as the chat template renders a chat client's
history. Like that test's harness, it keeps each call's `input` with its keys
sorted, so the next prompt agrees with the model's tokens through the call's
opener and diverges inside its arguments -- the rejoin point the anchor is
for. (A harness that passes every block back exactly as it got it diverges
nowhere: the next turn reuses the whole previous turn, anchors or not, since
the window's tail at the turn's end is still live.) Usage is Anthropic's: the share of
a prompt the prefix cache held is `cache_read_input_tokens`, and a turn's
whole prompt is that plus `input_tokens`.

Claims:
- with anchors on, each later turn's cache reaches past the previous turn's
  prompt into what that turn generated (its thought, up to its call);
- with anchors off, it falls back to the previous turn's prompt;
- the answers are the same either way: reuse never changes them.
"""

from __future__ import annotations

import json

import anthropic
import pytest

from models.demo.tools import execute
from test_demo_agent_loop import REQUEST, THOUGHT_CAP, TOOLS, _server

pytestmark = pytest.mark.slow

ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]


def _agent_loop(server) -> list[anthropic.types.Message]:
    client = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600)
    messages: list[dict] = [{"role": "user", "content": REQUEST}]
    turns = []
    for turn in range(3):
        forced = turn < 2
        message = client.messages.create(
            model="anchorage-demo", max_tokens=600, messages=messages, tools=ANTHROPIC_TOOLS,
            tool_choice={"type": "any"} if forced else {"type": "auto"},
            thinking={"type": "enabled", "budget_tokens": THOUGHT_CAP} if forced else {"type": "adaptive"},
            extra_body={"temperature": 0})
        turns.append(message)
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            break
        messages.append({"role": "assistant", "content": [_sorted_input(b.to_dict()) for b in message.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c.id, "content": execute(c.name, json.dumps(c.input))}
            for c in calls]})
    return turns


def _sorted_input(block: dict) -> dict:
    return {**block, "input": dict(sorted(block["input"].items()))} if block["type"] == "tool_use" else block


@pytest.fixture(scope="module")
def loops():
    with _server(anchors=True) as on:
        anchored = _agent_loop(on)
    with _server(anchors=False) as off:
        plain = _agent_loop(off)
    return anchored, plain


def _prompt(message) -> int:
    return message.usage.input_tokens + message.usage.cache_read_input_tokens


def test_the_loop_calls_twice_then_ends(loops):
    anchored, plain = loops
    assert len(anchored) == len(plain) == 3
    assert all(m.stop_reason == "tool_use" for m in anchored[:2])


def test_with_anchors_each_turn_reuses_past_the_previous_prompt_and_without_them_it_does_not(loops):
    anchored, plain = loops
    for turn in (1, 2):
        on, off, previous = anchored[turn].usage, plain[turn].usage, anchored[turn - 1]
        assert on.cache_read_input_tokens > _prompt(previous), (turn, on, _prompt(previous))
        assert off.cache_read_input_tokens <= _prompt(previous) < on.cache_read_input_tokens


def test_reuse_never_changes_an_answer(loops):
    anchored, plain = loops

    def blocks(message):
        return [{k: v for k, v in b.to_dict().items() if k != "id"} for b in message.content]

    assert [blocks(m) for m in anchored] == [blocks(m) for m in plain]
