"""A streamed chat chunk's logprobs are those of the tokens that wrote its delta.

The output parser holds some text back (a space that may come before a tool call,
a newline that may come before the thought's closer) and drops markup. A token
whose text is held goes out with the chunk that carries its text, not in a chunk
of its own with an empty delta, so a client pairing each chunk's text with its
logprobs (as OpenAI's chunks allow) reads them together. Every token's entry is
sent once, in order: the whole stream's list is the whole answer's.

Run on the demo checkpoint: it answers a tool result in words after a thought,
with tools offered, which is where the parser holds spaces.
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from live_server import live_server

ROOT = Path(__file__).resolve().parents[1]
TOOLS = json.loads((ROOT / "configs" / "demo_tools.json").read_text())
AFTER_RESULT = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
    {"role": "tool", "tool_call_id": "call_1",
     "content": json.dumps({"city": "Paris", "temperature_c": 18, "condition": "cloudy"})},
]


@pytest.fixture(scope="module")
def client():
    with live_server(ROOT / "models" / "demo" / "checkpoint", max_model_len=1024,
                     served_model_name="anchorage-demo") as server:
        yield openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")


def _text(delta) -> str:
    return (delta.content or "") + ((delta.model_extra or {}).get("reasoning_content") or "")


def test_each_streamed_answer_chunk_carries_the_logprobs_of_its_own_text(client):
    chunks = [c.choices[0] for c in client.chat.completions.create(
        model="anchorage-demo", messages=AFTER_RESULT, tools=TOOLS, temperature=0, max_tokens=80, logprobs=True,
        stream=True) if c.choices]
    answer = [c for c in chunks if c.delta.content]
    assert len(answer) >= 3, "the checkpoint no longer answers the tool result in words"
    # The first answer chunk also carries the thought's closer and the newlines after it (markup, no delta).
    for c in answer[1:]:
        assert "".join(t.token for t in c.logprobs.content) == c.delta.content
    spoken = [c for c in chunks if not c.finish_reason]
    assert all(_text(c.delta) for c in spoken if c.logprobs and c.logprobs.content), "logprobs on an empty delta"


def test_the_streamed_logprobs_are_the_whole_answers_in_order(client):
    kwargs = dict(model="anchorage-demo", messages=AFTER_RESULT, tools=TOOLS, temperature=0, max_tokens=80,
                  logprobs=True, top_logprobs=2)
    streamed = [t for c in client.chat.completions.create(stream=True, **kwargs) if c.choices
                for t in (c.choices[0].logprobs.content if c.choices[0].logprobs else None) or ()]
    whole = client.chat.completions.create(**kwargs).choices[0].logprobs.content
    assert [t.token for t in streamed] == [t.token for t in whole]
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in whole], abs=1e-4)
    assert [len(t.top_logprobs) for t in streamed] == [2] * len(whole)
