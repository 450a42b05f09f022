"""What the completion routes share: submit to the engine, collect, account.

- `submit` hands a prompt and params to the engine under a fresh request id.
- `collect` gathers a non-streamed request's events per choice while watching
  the client: a client that goes away aborts its request, so its pages come
  back at once instead of decoding for nobody.
- `usage_of` / `timings_of` turn the engine's per-choice stats into OpenAI's
  `usage` (with cached prompt tokens) and llama.cpp's `timings`.
- `chat_logprobs` / `completion_logprobs` shape token logprobs for each API;
  `echoed_prompt` puts the prompt's scored tokens before a completion's,
  `prompt_logprobs_of` gives them in vLLM's `prompt_logprobs` shape.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import weakref
from dataclasses import dataclass, field

from scheduler.engine import EngineRequest
from scheduler.request_stream import ChoiceStats, RequestStream, StreamEvent, TokenLogprob
from server.errors import NotFoundError, ServerError
from server.output.tool_calls import known_tool_parser
from server.protocol import Timings, Usage
from server.slot_wait import wait_for_slot


def check_model(requested: str | None, state) -> None:
    name = state.info.served_model_name
    if requested is not None and requested != name:
        raise NotFoundError(f"model {requested!r} does not exist; this server serves {name!r}", param="model",
                            code="model_not_found")  # OpenAI's code for it


async def submit(state, prompt_ids: list[int], params, id_slot: int | None = None,
                 http_request=None) -> RequestStream:
    """Enqueue a request, in the named slot -- waiting for it while another holds it, as llama.cpp defers
    such a task, so the slot ends up holding this request's tokens -- or in the idle one sharing the
    longest prefix (slot-less when none is idle). With `http_request`, a client that hangs up while its
    request waits for the slot gives up its place (nothing is run for it)."""
    n_slots = state.settings.parallel
    if id_slot is not None and id_slot >= n_slots:
        raise NotFoundError(f"slot {id_slot} does not exist; this server has {n_slots} slots (--parallel)",
                            param="id_slot")
    if id_slot is not None and id_slot >= 0:
        slot_id = await wait_for_slot(lambda: state.slots.acquire(id_slot, prompt_ids), id_slot, state.slots,
                                      http_request.is_disconnected if http_request is not None else None)
    else:
        slot_id = state.slots.acquire(id_slot, prompt_ids)
    rid = "req-" + secrets.token_hex(8)
    return state.engine.submit(EngineRequest(rid, list(prompt_ids), params, slot_id))


@dataclass
class ChoiceResult:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    finish_reason: str | None = None
    stats: ChoiceStats | None = None
    error: str | None = None
    prompt_logprobs: list | None = None  # the prompt's scored tokens, on the choice that scored them
    stop_token: int | None = None  # the EOS or stop id that ended it; None for a stop string or a cut
    stop_string: str | None = None  # the client's stop string that ended it, if one did
    # (text, its tokens' logprob entries) per event that brought either, as the events brought them: a
    # whole answer is read from these, as its stream reads them, so the two agree even where a stream
    # cannot take back what it sent (a call announced, then broken); the entries are for a reader that
    # pairs text with the tokens that wrote it (server/output/text_logprobs.py).
    written: list[tuple[str, list]] = field(default_factory=list)

    @property
    def pieces(self) -> list[str]:
        """The text as its events brought it, piece by piece."""
        return [text for text, _ in self.written if text]

    def add(self, ev: StreamEvent) -> None:
        if ev.prompt_logprobs is not None:
            self.prompt_logprobs = ev.prompt_logprobs
        self.text += ev.text
        if ev.text or ev.logprobs:
            self.written.append((ev.text, ev.logprobs))
        self.token_ids.extend(ev.token_ids)
        self.logprobs.extend(ev.logprobs)
        if ev.finish_reason is not None:
            self.finish_reason, self.stats, self.error = ev.finish_reason, ev.stats, ev.error
            self.stop_token, self.stop_string = ev.stop_token, ev.stop_string


async def body_size(http_request) -> int:
    """Bytes of the request's body: about how much client text preparing it reads, which decides its
    tokenizer lane (server/tokenizer_thread.py)."""
    length = http_request.headers.get("content-length", "")
    return int(length) if length.isdigit() else len(await http_request.body())


def continuous_usage(req) -> bool:
    """vLLM's `stream_options: {"include_usage": true, "continuous_usage_stats": true}`: every chunk
    carries the counts so far, not only the final usage chunk."""
    options = req.stream_options
    return bool(options and options.include_usage and options.continuous_usage_stats)


def raise_if_failed(ev_or_choice) -> None:
    if getattr(ev_or_choice, "finish_reason", None) == "error":
        raise ServerError(f"generation failed: {ev_or_choice.error or 'engine error'}")


async def collect(stream: RequestStream, http_request, engine, n: int) -> list[ChoiceResult]:
    choices = [ChoiceResult(i) for i in range(n)]

    async def consume():
        async for ev in stream:
            choices[ev.index].add(ev)

    task = asyncio.create_task(consume())
    try:
        while not task.done():
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if not done and await http_request.is_disconnected():
                engine.abort(stream.request_id)
        task.result()
    finally:
        if not task.done():
            engine.abort(stream.request_id)
            task.cancel()
    for c in choices:
        raise_if_failed(c)
    return choices


def streaming_body(state, stream: RequestStream, body):
    """Wrap a route's SSE generator so its request is aborted however the response ends.

    The generator's own `finally` covers a client that leaves mid-stream; a
    client that leaves before the first chunk cancels the response before the
    generator ever starts, and then only this finalizer notices.
    """
    weakref.finalize(body, state.engine.abort, stream.request_id)
    return body


def stop_reason_of(choice, req, eos_ids) -> int | str | None:
    """vLLM's `stop_reason` for a choice (a ChoiceResult or a final StreamEvent): the client's stop string or
    `stop_token_ids` id that ended it; None when it ended otherwise (the model's end of turn -- even one the
    client listed among its stop ids, as vLLM checks the end of turn first -- or a cut)."""
    if choice.stop_string is not None:
        return choice.stop_string
    token = choice.stop_token
    if token is not None and token in (req.stop_token_ids or ()) and not (token in eos_ids and not req.ignore_eos):
        return token
    return None


def usage_of(prompt_tokens: int, choices: list[ChoiceResult], reasoning_tokens: int | None = None) -> Usage:
    cached = choices[0].stats.cached_tokens if choices and choices[0].stats else 0
    return Usage.of(prompt_tokens, sum(len(c.token_ids) for c in choices), cached, reasoning_tokens)


def thought_token_count(state, token_ids: list[int], thought: bool, tool_format: str | None = None) -> int:
    """Generated tokens up to the thought's closing marker, the marker's included, or up to a tool call's
    opener when that comes first (the output readers end an unclosed thought there); all of them when the
    thought was cut: OpenAI's `reasoning_tokens`. 0 for a turn that did not think."""
    if not thought or state.info.reasoning is None:
        return 0
    encode = functools.partial(state.tokenizer.encode, add_special_tokens=False)
    closer = encode(state.info.reasoning.end)
    parser = known_tool_parser(tool_format)
    openers = [encode(o) for o in parser.openers] if parser else []
    for i in range(len(token_ids)):
        if token_ids[i:i + len(closer)] == closer:
            return i + len(closer)
        if any(opener and token_ids[i:i + len(opener)] == opener for opener in openers):
            return i
    return len(token_ids)


def timings_of(stats: ChoiceStats | None) -> Timings | None:
    if stats is None:
        return None
    return Timings.of(stats.cached_tokens, stats.prompt_tokens - stats.cached_tokens, stats.prompt_ms,
                      stats.completion_tokens, stats.predicted_ms)


def _piece(state, token: int) -> str:
    return state.tokenizer.decode([token], skip_special_tokens=False)


def chat_logprobs(state, entries) -> dict | None:
    if not entries:
        return None
    tb = state.token_bytes
    content = []
    for e in entries:
        content.append({
            "token": _piece(state, e.token), "logprob": e.logprob, "bytes": list(tb(e.token)),
            "top_logprobs": [{"token": _piece(state, t), "logprob": lp, "bytes": list(tb(t))} for t, lp in e.top],
        })
    return {"content": content}


def _legacy_name(state, token: int, piece: str) -> str:
    """A token's name in legacy logprobs, where names are dict keys: its text, or -- when its bytes are
    not whole UTF-8 characters (a piece of an emoji, say) -- `bytes:\\xNN...`, as OpenAI names them.
    Decoded, every such piece is the same U+FFFD, and the top_logprobs entries would overwrite each other."""
    raw = state.token_bytes(token)
    if "\ufffd" in piece and raw:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
    return piece


def completion_logprobs(state, entries, text_start: int = 0) -> dict | None:
    if not entries:
        return None
    tokens, lps, tops, offsets = [], [], [], []
    offset = text_start
    for e in entries:
        piece = _piece(state, e.token)
        tokens.append(_legacy_name(state, e.token, piece))
        lps.append(e.logprob)
        # OpenAI: "the API will always return the logprob of the sampled token, so there may be up to
        # logprobs+1 elements" -- with logprobs 0, just the sampled token (vLLM answers the same).
        top: dict[str, float] = {}
        # Most likely first: two tokens with one name (distinct ids that decode alike) keep the higher.
        for t, lp in sorted([*e.top, (e.token, e.logprob)], key=lambda pair: -pair[1]):
            top.setdefault(_legacy_name(state, t, _piece(state, t)), lp)
        tops.append(top)
        offsets.append(offset)
        offset += len(piece)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def pieces_length(state, entries) -> int:
    """How far `completion_logprobs` moves text_offset over `entries`: a stream's next chunk starts there,
    so streamed offsets are the whole response's (a token that ends mid-character counts its piece)."""
    return sum(len(_piece(state, e.token)) for e in entries)


def _whole_prompt(prompt_ids: list[int], prompt_entries) -> None:
    if prompt_entries is None or len(prompt_entries) != len(prompt_ids) - 1:
        raise ServerError("the engine did not return the prompt's logprobs")


@dataclass
class EchoedPrompt:
    """The prompt's part of echoed legacy logprobs, built once per prompt and shared by its choices."""

    logprobs: dict  # tokens, token_logprobs, top_logprobs, text_offset of the prompt's tokens
    end: int  # where the choice's own tokens start counting text_offset (the prompt's pieces' length)

    def with_choice(self, state, entries) -> dict:
        """The whole legacy logprobs of a choice: the prompt's, then `entries`' (its generated tokens)."""
        out = {key: list(values) for key, values in self.logprobs.items()}
        for key, values in (completion_logprobs(state, entries, self.end) or {}).items():
            out[key] += values
        return out


def echoed_prompt(state, prompt_ids: list[int], prompt_entries, k: int) -> EchoedPrompt:
    """Legacy logprobs of `echo` with `logprobs` k, the prompt's part. The prompt's first token has nothing
    before it to be scored by: its logprob and alternatives are null, as OpenAI and vLLM send them.
    text_offset counts every token's piece, a BOS the echoed text does not show included (vLLM counts
    so), so offsets only ever grow."""
    _whole_prompt(prompt_ids, prompt_entries)
    prompt_entries = [TokenLogprob(e.token, e.logprob, e.top[:k]) for e in prompt_entries]
    first = _piece(state, prompt_ids[0])
    out = {"tokens": [_legacy_name(state, prompt_ids[0], first)], "token_logprobs": [None], "top_logprobs": [None],
           "text_offset": [0]}
    for key, values in (completion_logprobs(state, prompt_entries, len(first)) or {}).items():
        out[key] += values
    return EchoedPrompt(out, len(first) + pieces_length(state, prompt_entries))


def prompt_logprobs_of(state, prompt_ids: list[int], prompt_entries, k: int) -> list[dict | None]:
    """vLLM's `prompt_logprobs`: null for the first prompt token, then per token a map from token id to
    `{logprob, rank, decoded_token}`: the prompt token's own (its rank among all tokens there) and its
    position's k likeliest (ranks 1..k)."""
    _whole_prompt(prompt_ids, prompt_entries)
    out: list[dict | None] = [None]
    for e in prompt_entries:
        at = {str(e.token): {"logprob": e.logprob, "rank": e.rank, "decoded_token": _piece(state, e.token)}}
        for rank, (t, lp) in enumerate(e.top[:k], start=1):
            at.setdefault(str(t), {"logprob": lp, "rank": rank, "decoded_token": _piece(state, t)})
        out.append(at)
    return out
