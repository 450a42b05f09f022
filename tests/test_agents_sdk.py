"""The OpenAI Agents SDK against the server: its Responses API model runs a tool loop on the demo model.

The Agents SDK is what many agents are written with, and it speaks the
Responses API by default (`OpenAIResponsesModel`): it sends the conversation
back as input items -- reasoning items included -- and streams with its own
event handling. The demo model gets its four tools with the schemas it was
trained on, runs them for real (models/demo/tools.py), and must come back
with the tool's value, whole, streamed and chained by `previous_response_id`
alike, the second turn reusing the first from the prefix cache.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from agents import Agent, FunctionTool, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from live_server import live_server
from models.demo.tools import execute

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
TOOLS = json.loads((ROOT / "configs" / "demo_tools.json").read_text())


def _tool(spec: dict, calls: list) -> FunctionTool:
    f = spec["function"]

    async def invoke(ctx, arguments: str) -> str:
        calls.append((f["name"], json.loads(arguments)))
        return execute(f["name"], arguments)
    return FunctionTool(name=f["name"], description=f["description"], params_json_schema=f["parameters"],
                        on_invoke_tool=invoke, strict_json_schema=False)


def test_an_agents_sdk_run_calls_the_tool_and_answers_with_its_value_whole_and_streamed():
    set_tracing_disabled(True)  # nothing leaves the machine
    calls: list = []
    with live_server(ROOT / "models" / "demo" / "checkpoint", max_model_len=2048, kv_cache_tokens=8192,
                     served_model_name="anchorage-demo") as server:
        sent: list[dict] = []

        async def record(request: httpx.Request) -> None:
            sent.append(json.loads(request.content))
        client = AsyncOpenAI(base_url=server.v1, api_key="unused", max_retries=0,
                             http_client=httpx.AsyncClient(event_hooks={"request": [record]}))
        agent = Agent(name="demo", model=OpenAIResponsesModel(model="anchorage-demo", openai_client=client),
                      tools=[_tool(t, calls) for t in TOOLS], model_settings=ModelSettings(temperature=0, max_tokens=400))

        async def both():
            whole = await Runner.run(agent, "What is 12 + 30?", max_turns=4)
            streamed = Runner.run_streamed(agent, "What is 12 + 30?", max_turns=4)
            events = [event.type async for event in streamed.stream_events()]
            # Chained: each model call after the first names the last response and sends only the new items.
            chained = await Runner.run(agent, "What is 12 + 30?", max_turns=4, auto_previous_response_id=True)
            return whole.final_output, streamed.final_output, events, chained

        whole, streamed, events, chained = asyncio.run(both())
        metrics = httpx.get(server.base_url + "/metrics", timeout=30).text
    assert calls == [("calculate", {"a": 12, "op": "+", "b": 30})] * 3
    assert "42" in whole and streamed == whole and chained.final_output == whole
    named = [body for body in sent if body.get("previous_response_id")]
    assert len(named) == 1 and named[0]["previous_response_id"] == chained.raw_responses[0].response_id
    assert [item["type"] for item in named[0]["input"]] == ["function_call_output"], "only what is new is sent"
    second = chained.raw_responses[1]
    assert second.response_id != chained.raw_responses[0].response_id
    assert second.usage.input_tokens_details.cached_tokens > chained.raw_responses[0].usage.input_tokens / 2
    assert "raw_response_event" in events
    hits = next(float(line.split()[1]) for line in metrics.splitlines()
                if line.startswith("anchorage:prefix_cache_hit_tokens_total"))
    prompts = next(float(line.split()[1]) for line in metrics.splitlines()
                   if line.startswith("anchorage:prompt_tokens_total"))
    assert hits > prompts / 2, "each turn after the first rejoins the cache (the SDK passes the reasoning back)"
