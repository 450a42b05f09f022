"""The engine: a dedicated thread that runs schedule -> forward -> sample -> emit.

Everything that mutates scheduling state (the queues, the pool, the prefix
cache, page tables) happens on the engine thread. Other threads talk to it
through a command queue: `submit`, `abort` and `call` (run a function between
steps, used by slot save/restore) only enqueue and wake the loop, so they are
thread-safe without locks around the bookkeeping.

The model side is injected (`runner.step(batch) -> logits`, a sampler with
`new_state` / `sample`, a processor factory for per-sequence logit processors)
so this module stays free of torch; logits pass through it untouched.

A sequence finishes on EOS or a stop token id (unless ignore_eos), a stop
string, `max_tokens`, or the context length (`max_model_len`). The terminal
token id is reported but never detokenized into the text. It ends with an
error when something fails, and only the sequence whose work failed: a failed
forward step is retried one sequence at a time (`_forward_alone`), so the
sequences that run alone go on and only one that fails alone ends; a failed
sampling ends the sequence it was for. Waiting sequences are never touched.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass

from scheduler.batch_scheduler import BatchScheduler, Decision
from scheduler.forward_batch import ForwardBatch
from scheduler.detokenizer import IncrementalDetokenizer
from scheduler.request_stream import ChoiceStats, RequestStream, StreamEvent, TokenLogprob
from scheduler.sampling_params import SamplingParams
from scheduler.sequence import Sequence
from scheduler.stop_strings import StopMatcher

log = logging.getLogger("anchorage.engine")

FORWARD_FAILED = "internal error in the model's forward step for this request; see server log"


class EngineStopped(RuntimeError):
    """An `Engine.call` the engine thread will never run: it has stopped."""


@dataclass
class EngineRequest:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    slot_id: int | None = None


@dataclass
class EngineCounters:
    requests_finished: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    steps: int = 0
    step_errors: int = 0


class _Live:
    """Per-sequence companions that are not bookkeeping: stream, text, sampler state."""

    def __init__(self, seq: Sequence, stream: RequestStream, detok, stops, state):
        self.seq, self.stream, self.detok, self.stops, self.state = seq, stream, detok, stops, state
        # The prompt's scored tokens (prompt logprobs), gathered over its chunks and sent on the
        # sequence's first event; None when not asked for, or once sent.
        self.prompt_logprobs: list[TokenLogprob] | None = [] if seq.scores_prompt else None

    def take_prompt_logprobs(self) -> list[TokenLogprob] | None:
        out, self.prompt_logprobs = self.prompt_logprobs, None
        return out


class Engine:
    def __init__(self, *, runner, sampler, tokenizer, scheduler: BatchScheduler, eos_ids, max_model_len: int,
                 processor_factory=None, hidden_ids: frozenset[int] = frozenset()):
        self.runner, self.sampler, self.tokenizer = runner, sampler, tokenizer
        self.hidden_ids = hidden_ids  # control tokens a generation's text leaves out (skip_special_tokens)
        self.scheduler = scheduler
        self.eos_ids = frozenset(eos_ids)
        self.max_model_len = max_model_len
        self.processor_factory = processor_factory or (lambda seq: [])
        self.counters = EngineCounters()
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._live: dict[int, _Live] = {}
        self._by_request: dict[str, list[Sequence]] = {}
        self._seq_ids = itertools.count()
        self._stop = threading.Event()
        # Set, under the lock, once the loop has ended: a call after that fails at once instead of waiting
        # forever (a slot save or restore blocks a worker thread on its calls, and would hold up the exit).
        self._calls_closed = False
        self._calls_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.on_end = []  # callbacks(seq) on the engine thread when a sequence ends, however

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="anchorage-engine", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout)

    # -- thread-safe API ----------------------------------------------------------------
    def submit(self, request: EngineRequest) -> RequestStream:
        stream = RequestStream(request.request_id, request.params.n)
        self._commands.put(("submit", request, stream))
        self._wake.set()
        return stream

    def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id, None))
        self._wake.set()

    def call(self, fn) -> Future:
        """Run fn(engine) on the engine thread between steps; returns a Future of its result."""
        fut: Future = Future()
        with self._calls_lock:
            if self._calls_closed:
                fut.set_exception(EngineStopped("the engine has stopped (the server is shutting down)"))
                return fut
            self._commands.put(("call", fn, fut))
        self._wake.set()
        return fut

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    # -- engine thread ------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._drain_commands()
            if not self.scheduler.has_work():
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                self.step()
            except Exception:  # a bug or OOM must not kill the server: fail what ran, go on
                self.counters.step_errors += 1
                log.error("engine step failed:\n%s", traceback.format_exc())
                self._fail_all("internal error in the engine step; see server log")
        self._fail_all("server shutting down")
        with self._calls_lock:
            self._calls_closed = True
        self._fail_calls()

    def _fail_calls(self) -> None:
        """Fail the calls still queued when the loop ended; other commands die with the engine."""
        for kind, _, fut in self._queued_commands():
            if kind == "call" and fut.set_running_or_notify_cancel():
                fut.set_exception(EngineStopped("the engine stopped before running this call"))

    def _queued_commands(self):
        """The commands queued now, in order, taken off the queue one by one."""
        while True:
            try:
                yield self._commands.get_nowait()
            except queue.Empty:
                return

    def _drain_commands(self) -> None:
        for kind, a, b in self._queued_commands():
            if kind == "submit":
                try:
                    self._add(a, b)
                except Exception:  # e.g. a processor that fails to build: it ends this request, not the engine
                    self.counters.step_errors += 1
                    log.error("taking in request %s failed:\n%s", a.request_id, traceback.format_exc())
                    self._refuse(a, b, "internal error while taking in the request; see server log")
            elif kind == "abort":
                self._abort(a)
            elif kind == "call":
                if b.set_running_or_notify_cancel():
                    try:
                        b.set_result(a(self))
                    except BaseException as exc:  # handed to the caller, not raised here
                        b.set_exception(exc)

    def _add(self, req: EngineRequest, stream: RequestStream) -> None:
        # Every choice is built before any is registered: a failure half-way leaves nothing on the books.
        lives, leader = [], None
        for i in range(req.params.n):
            seq = Sequence(next(self._seq_ids), req.request_id, i, list(req.prompt_ids), req.params,
                           leader=leader, slot_id=req.slot_id)
            leader = leader or seq
            state = self.sampler.new_state(req.params, i, self.processor_factory(seq))
            stops = StopMatcher(req.params.stop)
            hidden = self.hidden_ids if req.params.skip_special_tokens else frozenset()
            detok = IncrementalDetokenizer(self.tokenizer, seq.prompt_ids, hidden)
            lives.append(_Live(seq, stream, detok, stops, state))
        for live in lives:
            self._live[live.seq.seq_id] = live
            self.scheduler.add(live.seq)
        self._by_request[req.request_id] = [live.seq for live in lives]
        self.counters.prompt_tokens += len(req.prompt_ids)

    def _refuse(self, req: EngineRequest, stream: RequestStream, message: str) -> None:
        """End a request `_add` could not take in (nothing of it is on the books): the end callbacks hear of
        its first choice, as of any ended one -- the slot the route took for it goes idle again -- and each
        choice gets an error."""
        ended = Sequence(next(self._seq_ids), req.request_id, 0, list(req.prompt_ids), req.params,
                         slot_id=req.slot_id)
        ended.finish_reason = "error"
        self._run_end_callbacks(ended)
        nothing = ChoiceStats(len(req.prompt_ids), 0, 0, 0.0, 0.0, 0)
        for i in range(req.params.n):
            stream.put(StreamEvent(i, finish_reason="error", stats=nothing, error=message))

    def _abort(self, request_id: str) -> None:
        for seq in self._by_request.pop(request_id, []):
            if not seq.finished:
                self.scheduler.abort(seq, keep_computed=True)
                self._emit_final(seq, "abort")

    def _fail_all(self, message: str) -> None:
        for live in list(self._live.values()):
            self._fail(live.seq, message)

    def _fail(self, seq: Sequence, message: str) -> None:
        if seq.seq_id not in self._live:
            return  # already finished (an error after its final event)
        self.scheduler.abort(seq)
        seq.finish_reason = "error"
        self._emit_final(seq, "error", error=message)

    def step(self) -> None:
        decision = self.scheduler.schedule()
        for seq in decision.starved:
            log.warning("sequence %s cannot fit in the KV pool even alone; finishing it", seq.seq_id)
            self._finish(seq, "length", [])
        if decision.empty:
            return
        try:
            # scored: [k, vocab] per chunk scoring prompt tokens; rows: [1, vocab] per sampling chunk.
            scored, rows = decision.batch.split_logits(self.runner.step(decision.batch))
        except Exception:
            self.counters.step_errors += 1
            alone = len(decision.seqs) == 1
            log.error("forward step of %d sequence(s) failed%s:\n%s", len(decision.seqs),
                      "" if alone else "; retrying each alone", traceback.format_exc())
            if alone:  # nothing to tell apart: it failed alone already
                self._fail(decision.seqs[0], FORWARD_FAILED)
                return
            decision, scored, rows = self._forward_alone(decision)
            if decision.empty:
                return
        self.scheduler.after_step(decision)
        self.counters.steps += 1
        scoring = [(s, c) for s, c in zip(decision.seqs, decision.batch.chunks) if c.num_scored]
        for (seq, chunk), block in zip(scoring, scored):
            self._score(seq, chunk, block)
        sampling = [(s, c) for s, c in zip(decision.seqs, decision.batch.chunks) if c.sample]
        for row, (seq, chunk) in enumerate(sampling):
            if seq.seq_id not in self._live:  # its prompt's scoring failed: it has ended already
                continue
            if seq.params.max_tokens == 0:  # echo only: the prompt is in (and scored); nothing is generated
                self._finish(seq, "length", [])
                continue
            # One sequence at a time: a sequence whose sampling fails (a bug its parameters or its grammar
            # reach) ends with an error alone; the others in the batch go on.
            try:
                self._sample_rows(seq, rows[row], chunk.draft_ids)
            except Exception:
                self.counters.step_errors += 1
                log.error("sampling sequence %s failed:\n%s", seq.seq_id, traceback.format_exc())
                self._fail(seq, "internal error while sampling this request; see server log")

    def _sample_rows(self, seq: Sequence, block, drafts: list[int]) -> None:
        """Sample `seq`'s next token from block[0] ([1 + len(drafts), vocab]); while each sample equals the draft
        fed at that position, that draft's KV is the sequence's and block[i + 1] samples the token after it.
        Every sample is a token the sequence keeps, drawn from the model's logits with the processors' state
        of the tokens before it, as a plain decode draws it: drafts change how many tokens a step yields, not
        how each is drawn (scheduler/ngram_draft.py says where bf16 rounding can still tell them apart)."""
        state = self._live[seq.seq_id].state
        for i in range(len(drafts) + 1):
            [res] = self.sampler.sample(block[i:i + 1], [state], [(seq.prompt_ids, seq.output_ids)])
            self._accept(seq, res)
            if seq.seq_id not in self._live or i == len(drafts) or res.token != drafts[i]:
                return  # finished, out of drafts, or the guess was wrong: the rest of the block is unused
            self.scheduler.accept_draft(seq)

    def _forward_alone(self, decision: Decision) -> tuple[Decision, list]:
        """Run each chunk of a failed step as a batch of its own; end the sequences whose chunk still fails.

        Why: a batch fails as a whole, and one request's chunk (or a batch too big for memory) should not end
        every request that shared the step. A chunk only writes KV at its own positions, in pages its
        sequence alone holds, so running it again overwrites whatever the failed step left there.
        Returns the step that did run and its logits as ForwardBatch.split_logits gives them.
        """
        kept, scored, rows = Decision(ForwardBatch(), []), [], []
        for seq, chunk in zip(decision.seqs, decision.batch.chunks):
            alone = ForwardBatch([chunk])
            try:
                mine, row = alone.split_logits(self.runner.step(alone))
            except Exception:
                self.counters.step_errors += 1
                log.error("forward step of sequence %s alone failed; ending it:\n%s", seq.seq_id,
                          traceback.format_exc())
                self._fail(seq, FORWARD_FAILED)
                continue
            kept.batch.chunks.append(chunk)
            kept.seqs.append(seq)
            scored += mine
            rows += row
        return kept, scored, rows

    def _score(self, seq: Sequence, chunk, block) -> None:
        """Record the prompt tokens `chunk`'s scored positions predict; block is their logits [k, vocab].
        A failure ends this sequence alone, as a failed sampling does."""
        live = self._live.get(seq.seq_id)
        if live is None or live.prompt_logprobs is None:
            return
        following = seq.prompt_ids[chunk.score_from + 1:chunk.score_to + 1]
        try:
            scores = self.sampler.score(block, following, seq.params.prompt_logprobs)
        except Exception:
            self.counters.step_errors += 1
            log.error("scoring the prompt of sequence %s failed:\n%s", seq.seq_id, traceback.format_exc())
            self._fail(seq, "internal error while scoring this request's prompt; see server log")
            return
        live.prompt_logprobs += [TokenLogprob(t, lp, top, rank) for t, (lp, rank, top) in zip(following, scores)]
        seq.prompt_scored = chunk.score_to

    def _accept(self, seq: Sequence, res) -> None:
        live = self._live[seq.seq_id]
        p = seq.params
        token = res.token
        now = time.monotonic()
        if seq.first_token_time is None:
            seq.first_token_time = now
        seq.output_ids.append(token)
        self.counters.generation_tokens += 1
        lp = [TokenLogprob(token, res.logprob, res.top or [])] if res.logprob is not None else []

        terminal = (token in self.eos_ids and not p.ignore_eos) or token in p.stop_token_ids
        reason = "stop" if terminal else None
        text = ""
        # min_tokens: no stop string ends in these tokens (vLLM's rule); one that begins in them may end after.
        matching = len(seq.output_ids) > p.min_tokens
        if not terminal:
            text, hit = live.stops.feed(live.detok.add(token), match=matching)
            if hit:
                reason = "stop"
        if reason is None and (len(seq.output_ids) >= p.max_tokens or seq.num_tokens >= self.max_model_len):
            reason = "length"
        self.scheduler.on_sampled(seq, token, reason is not None)
        if reason is None:
            live.stream.put(StreamEvent(seq.index, text, [token], lp, prompt_logprobs=live.take_prompt_logprobs(),
                                        cached_tokens=self._cached_once(seq)))
            return
        if reason == "length" or (reason == "stop" and terminal):
            text += live.stops.feed(live.detok.flush(), match=matching)[0] + live.stops.flush()
        self._finish(seq, reason, lp, text=text, token=token, stop_token=token if terminal else None)

    @staticmethod
    def _cached_once(seq: Sequence) -> int | None:
        """The prompt tokens the cache held, on a choice's first generated token only."""
        return max(0, seq.num_cached_prompt) if len(seq.output_ids) == 1 else None

    def _finish(self, seq: Sequence, reason: str, lp, text: str = "", token: int | None = None,
                stop_token: int | None = None) -> None:
        self.scheduler.finish(seq, reason)
        self._emit_final(seq, reason, text=text, token_ids=[token] if token is not None else [], lp=lp,
                         stop_token=stop_token)

    def _run_end_callbacks(self, seq: Sequence) -> None:
        for cb in self.on_end:
            try:
                cb(seq)
            except Exception:  # the final event must still go out: a stream left without one waits forever
                self.counters.step_errors += 1
                log.error("end-of-sequence callback failed for %s:\n%s", seq.seq_id, traceback.format_exc())

    def _emit_final(self, seq, reason, text="", token_ids=(), lp=(), stop_token=None, error=None) -> None:
        live = self._live.pop(seq.seq_id, None)
        if live is None:
            return
        self._run_end_callbacks(seq)
        seq.finish_time = time.monotonic()
        first = seq.first_token_time or seq.finish_time
        stats = ChoiceStats(
            prompt_tokens=len(seq.prompt_ids),
            cached_tokens=max(0, seq.num_cached_prompt),
            completion_tokens=len(seq.output_ids),
            prompt_ms=(first - seq.arrival) * 1000.0,
            predicted_ms=(seq.finish_time - first) * 1000.0,
            preemptions=seq.preemptions,
        )
        # Prompt logprobs go out whole or not at all: a sequence that ends before its prompt is scored sends none.
        scored = live.take_prompt_logprobs() if seq.prompt_scored >= len(seq.prompt_ids) - 1 else None
        live.stream.put(StreamEvent(seq.index, text, list(token_ids), list(lp), reason, stop_token, stats, error,
                                    prompt_logprobs=scored,
                                    stop_string=live.stops.matched if reason == "stop" and stop_token is None else None))
        # Requests that ran to an end (stop/length); aborts and failures are not finishes.
        self.counters.requests_finished += seq.index == 0 and reason in ("stop", "length")
        group = self._by_request.get(seq.request_id)
        if group is not None and all(s.finished for s in group):
            del self._by_request[seq.request_id]
