"""POST /v1/completions: a raw prompt (text or token ids) continued as text.

No chat template and no output parsing: the text is the model's, minus any
stop string. The prompt may be token ids (vLLM and llama.cpp accept them), so
an agent that keeps the ids a previous response returned (`return_token_ids`)
can send them back and hit the prefix cache exactly.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from scheduler.sampling_params import SamplingParams
from server.engine_params import to_sampling_params
from server.errors import APIError
from server.generation import (
    check_model,
    collect,
    completion_logprobs,
    continuous_usage,
    raise_if_failed,
    streaming_body,
    submit,
    timings_of,
    usage_of,
)
from server.protocol import Completion, CompletionChoice, CompletionChunk, CompletionRequest, Usage, new_completion_id
from server.sse import DONE, event
from server.tokenizer_thread import off_loop

router = APIRouter()


def _prompt(req: CompletionRequest, tokenizer) -> tuple[str, list[int]]:
    if isinstance(req.prompt, str):
        return req.prompt, tokenizer.encode(req.prompt, add_special_tokens=True)
    return tokenizer.decode(req.prompt, skip_special_tokens=False), list(req.prompt)


def _prepare(req: CompletionRequest, state) -> tuple[list[int], SamplingParams]:
    """The prompt's ids and the engine's parameters: every tokenizer call a request makes, on the tokenizer thread."""
    text, ids = _prompt(req, state.tokenizer)
    return ids, to_sampling_params(req, state, text, ids, logprobs=req.logprobs)


@router.post("/v1/completions")
async def completions(req: CompletionRequest, http_request: Request):
    state = http_request.app.state.server
    state.require_ready()
    check_model(req.model, state)
    ids, params = await off_loop(_prepare, req, state)
    stream = await submit(state, ids, params, req.id_slot)
    if req.stream:
        return StreamingResponse(streaming_body(state, stream, _stream(state, req, stream, ids)), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    choices = await collect(stream, http_request, state.engine, req.n)
    out = [CompletionChoice(
        index=c.index, text=c.text, finish_reason=c.finish_reason if c.finish_reason in ("stop", "length") else "stop",
        logprobs=completion_logprobs(state, c.logprobs) if req.logprobs is not None else None,
        token_ids=c.token_ids if req.return_token_ids else None,
        prompt_token_ids=ids if req.return_token_ids else None,
    ) for c in choices]
    return Completion(model=state.info.served_model_name, choices=out, usage=usage_of(len(ids), choices),
                      timings=timings_of(choices[0].stats)).model_dump(mode="json")


async def _stream(state, req: CompletionRequest, stream, prompt_ids):
    cid, model, created = new_completion_id(), state.info.served_model_name, int(time.time())  # one for every chunk
    offsets = [0] * req.n
    prompt_sent = [False] * req.n
    stats0 = None
    continuous = continuous_usage(req)
    by_choice = [0] * req.n  # completion tokens so far per choice (continuous usage counts per choice, as vLLM's)
    try:
        async for ev in stream:
            raise_if_failed(ev)
            by_choice[ev.index] += len(ev.token_ids)
            lp = completion_logprobs(state, ev.logprobs, offsets[ev.index]) if req.logprobs is not None else None
            offsets[ev.index] += len(ev.text)
            reason = None
            if ev.finish_reason is not None:
                reason = ev.finish_reason if ev.finish_reason in ("stop", "length") else "stop"
                stats0 = ev.stats if ev.index == 0 else stats0
            # return_token_ids: the prompt's ids ride on each choice's first chunk, as vLLM sends them.
            first = req.return_token_ids and not prompt_sent[ev.index]
            if first:
                prompt_sent[ev.index] = True
            choice = CompletionChoice(index=ev.index, text=ev.text, finish_reason=reason, logprobs=lp,
                                      token_ids=ev.token_ids if req.return_token_ids else None,
                                      prompt_token_ids=prompt_ids if first else None)
            running = Usage.running(len(prompt_ids), by_choice[ev.index]) if continuous else None
            yield event(CompletionChunk(id=cid, created=created, model=model, choices=[choice], usage=running,
                                        timings=timings_of(ev.stats) if reason else None))
        if req.stream_options and req.stream_options.include_usage:
            usage = Usage.of(len(prompt_ids), sum(by_choice), stats0.cached_tokens if stats0 else 0)
            yield event(CompletionChunk(id=cid, created=created, model=model, choices=[], usage=usage))
        yield DONE
    except APIError as exc:  # in-band, then the stream's usual end (chat.py's stream does the same)
        yield event(exc.body())
        yield DONE
    finally:
        state.engine.abort(stream.request_id)
