"""POST /v1/completions: a raw prompt (text or token ids) continued as text.

No chat template and no output parsing: the text is the model's, minus any
stop string. The prompt may be token ids (vLLM and llama.cpp accept them), so
an agent that keeps the ids a previous response returned (`return_token_ids`)
can send them back and hit the prefix cache exactly. With `echo` each choice's
text starts with its prompt's text (in a stream, on the choice's first chunk);
with `echo` and `logprobs` its logprobs start with the prompt's tokens, each
scored by the tokens before it (how lm-evaluation-harness scores likelihoods).
"""

from __future__ import annotations

import asyncio
import json
import time

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from scheduler.sampling_params import SamplingParams
from server.engine_params import to_sampling_params
from server.errors import APIError
from server.generation import (
    body_size,
    check_model,
    collect,
    completion_logprobs,
    continuous_usage,
    EchoedPrompt,
    echoed_prompt,
    pieces_length,
    prompt_logprobs_of,
    raise_if_failed,
    stop_reason_of,
    streaming_body,
    submit,
    timings_of,
)
from server.protocol import Completion, CompletionChoice, CompletionChunk, CompletionRequest, Usage, new_completion_id
from server.prompt_size import refuse_surely_too_long
from server.sse import DONE, HEADERS, event
from server.tokenizer_thread import off_loop

router = APIRouter()


def _prompt(prompt: str | list[int], state, field: str) -> tuple[str, list[int]]:
    tokenizer, info = state.tokenizer, state.info
    if isinstance(prompt, str):
        refuse_surely_too_long(prompt, info.longest_piece_bytes, info.max_model_len, field)
        return prompt, tokenizer.encode(prompt, add_special_tokens=True)
    return tokenizer.decode(prompt, skip_special_tokens=False), list(prompt)


def _prepare(req: CompletionRequest, state) -> list[tuple[str, list[int], SamplingParams]]:
    """Each prompt's text, ids and engine parameters: every tokenizer call a request makes, on a tokenizer
    thread. Any prompt that fails fails the request, before anything is submitted."""
    out = []
    for p, prompt in enumerate(req.prompt):
        field = "prompt" if len(req.prompt) == 1 else f"prompt.{p}"
        text, ids = _prompt(prompt, state, field)
        # echo with logprobs scores the prompt too (OpenAI's way of asking for prompt logprobs), as does
        # vLLM's prompt_logprobs; the engine keeps the larger count of alternatives, each view its own.
        scored = max((k for k in (req.logprobs if req.echo else None, req.prompt_logprobs) if k is not None),
                     default=None)
        out.append((text, ids, to_sampling_params(req, state, text, ids, logprobs=req.logprobs, field=field,
                                                  prompt_logprobs=scored)))
    return out


@router.post("/v1/completions")
async def completions(req: CompletionRequest, http_request: Request):
    state = http_request.app.state.server
    state.require_ready()
    check_model(req.model, state)
    prepared = await off_loop(_prepare, req, state, text_size=await body_size(http_request))
    streams = []
    try:
        for _, ids, params in prepared:
            streams.append(await submit(state, ids, params, req.id_slot, http_request))
    except BaseException:
        _abort(state, streams)
        raise
    prompts = [ids for _, ids, _ in prepared]
    echoed = [text if req.echo else "" for text, _, _ in prepared]  # what each prompt's choices start with
    if req.stream:
        body = _stream(state, req, streams, prompts, echoed)
        for stream in streams:
            body = streaming_body(state, stream, body)
        return StreamingResponse(body, media_type="text/event-stream",
                                 headers=HEADERS)
    try:
        # The prompts decode together in the engine; their results are read one after the other.
        results = [await collect(stream, http_request, state.engine, req.n) for stream in streams]
    finally:
        _abort(state, streams)  # a no-op for finished requests; frees the rest if one failed
    # Shaping logprobs decodes a piece per token (and per alternative): for a long scored prompt that is
    # seconds of work, done on a tokenizer thread, once per prompt, while the event loop serves others.
    body = await off_loop(_whole_body, state, req, results, prompts, echoed)
    return Response(body, media_type="application/json")


def _whole_body(state, req: CompletionRequest, results, prompts, echoed) -> bytes:
    """The whole response as JSON bytes (run on a tokenizer thread)."""
    out = []
    for p, choices in enumerate(results):
        scored = choices[0].prompt_logprobs  # the prompt's tokens, scored by the choice that ran it
        head = echoed_prompt(state, prompts[p], scored, req.logprobs) if req.echo and req.logprobs is not None \
            else None
        vllm = prompt_logprobs_of(state, prompts[p], scored, req.prompt_logprobs) \
            if req.prompt_logprobs is not None else None
        for c in choices:
            out.append(CompletionChoice(
                index=p * req.n + c.index, text=echoed[p] + c.text,
                finish_reason=c.finish_reason if c.finish_reason in ("stop", "length") else "stop",
                stop_reason=stop_reason_of(c, req, state.engine.eos_ids),
                logprobs=_choice_logprobs(state, req, head, c.logprobs),
                token_ids=c.token_ids if req.return_token_ids else None,
                prompt_token_ids=prompts[p] if req.return_token_ids else None,
                prompt_logprobs=vllm,
            ))
    every = [c for choices in results for c in choices]
    cached = sum(choices[0].stats.cached_tokens for choices in results if choices[0].stats)
    usage = Usage.of(sum(len(ids) for ids in prompts), sum(len(c.token_ids) for c in every), cached)
    payload = Completion(model=state.info.served_model_name, choices=out, usage=usage,
                         timings=timings_of(results[0][0].stats)).model_dump(mode="json")
    # Separators and ensure_ascii as FastAPI's JSONResponse writes them.
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _choice_logprobs(state, req: CompletionRequest, head: EchoedPrompt | None, entries):
    """A choice's legacy logprobs: with echo the prompt's scored tokens (`head`) come first."""
    if req.logprobs is None:
        return None
    if head is not None:
        return head.with_choice(state, entries)
    return completion_logprobs(state, entries)


def _abort(state, streams) -> None:
    for stream in streams:
        state.engine.abort(stream.request_id)


async def _merged(streams):
    """(prompt index, event) from every stream as the events come, each stream's in its own order."""
    if len(streams) == 1:
        async for ev in streams[0]:
            yield 0, ev
        return
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(p, stream):
        try:
            async for ev in stream:
                await queue.put((p, ev))
        except Exception as exc:  # handed to the reader, which raises it
            await queue.put((p, exc))
        else:
            await queue.put((p, done))

    tasks = [asyncio.create_task(pump(p, s)) for p, s in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            p, ev = await queue.get()
            if ev is done:
                running -= 1
            elif isinstance(ev, Exception):
                raise ev
            else:
                yield p, ev
    finally:
        for task in tasks:
            task.cancel()


async def _stream(state, req: CompletionRequest, streams, prompts, echoed):
    cid, model, created = new_completion_id(), state.info.served_model_name, int(time.time())  # one for every chunk
    n = req.n
    choices = len(prompts) * n  # choice p * n + i is prompt p's i-th
    offsets = [0] * choices  # each choice's next token's text_offset (legacy logprobs)
    prompt_sent = [False] * choices
    prompt_scored = [None] * len(prompts)  # each prompt's scored tokens, from its first choice's first event
    heads: list[EchoedPrompt | None] = [None] * len(prompts)  # echo with logprobs: each prompt's part, once
    first_stats = [None] * len(prompts)
    continuous = continuous_usage(req)
    by_choice = [0] * choices  # completion tokens so far per choice (continuous usage counts per choice, as vLLM's)
    try:
        async for p, ev in _merged(streams):
            raise_if_failed(ev)
            g = p * n + ev.index
            by_choice[g] += len(ev.token_ids)
            if ev.prompt_logprobs is not None:
                prompt_scored[p] = ev.prompt_logprobs
            first = not prompt_sent[g]
            if first and req.echo and req.logprobs is not None:
                # The echoed prompt's logprobs lead the choice's first chunk, as its text does; shaped once
                # per prompt, on a tokenizer thread.
                if heads[p] is None:
                    heads[p] = await off_loop(echoed_prompt, state, prompts[p], prompt_scored[p], req.logprobs)
                lp = heads[p].with_choice(state, ev.logprobs)
                offsets[g] = heads[p].end
            else:
                lp = completion_logprobs(state, ev.logprobs, offsets[g]) if req.logprobs is not None else None
            if req.logprobs is not None:
                offsets[g] += pieces_length(state, ev.logprobs)
            reason = None
            if ev.finish_reason is not None:
                reason = ev.finish_reason if ev.finish_reason in ("stop", "length") else "stop"
                first_stats[p] = ev.stats if ev.index == 0 else first_stats[p]
            # The prompt's ids (return_token_ids) and its echoed text ride on each choice's first chunk, as
            # vLLM sends them.
            prompt_sent[g] = True
            choice = CompletionChoice(index=g, text=echoed[p] + ev.text if first else ev.text, finish_reason=reason,
                                      stop_reason=stop_reason_of(ev, req, state.engine.eos_ids) if reason else None,
                                      logprobs=lp, token_ids=ev.token_ids if req.return_token_ids else None,
                                      prompt_token_ids=prompts[p] if first and req.return_token_ids else None)
            running = Usage.running(len(prompts[p]), by_choice[g]) if continuous else None
            yield event(CompletionChunk(id=cid, created=created, model=model, choices=[choice], usage=running,
                                        timings=timings_of(ev.stats) if reason else None))
        if req.stream_options and req.stream_options.include_usage:
            cached = sum(stats.cached_tokens for stats in first_stats if stats)
            usage = Usage.of(sum(len(ids) for ids in prompts), sum(by_choice), cached)
            yield event(CompletionChunk(id=cid, created=created, model=model, choices=[], usage=usage))
        yield DONE
    except APIError as exc:  # in-band, then the stream's usual end (chat.py's stream does the same)
        yield event(exc.body())
        yield DONE
    finally:
        _abort(state, streams)
