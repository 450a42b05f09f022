"""A fake engine loop for scheduler tests: BatchScheduler driven without a model.

What it is for: running the real bookkeeping (pool, prefix cache, allocator,
scheduler, window slides) through many steps and checking, after every step,
everything a model runner would rely on:

- every chunk feeds exactly the tokens after the sequence's computed prefix,
  within the token budget and the seat limit;
- page tables cover the chunk, and the window pages a windowed layer reads
  (`[start - window + 1, end)`) are live;
- a fake KV store: each written slot records a digest of the token prefix it
  was computed from, and every slot a chunk reads must hold the digest of the
  reading sequence's own prefix -- so a page recycled while still read, a
  cache hit served from the wrong span, or progress claimed without KV, all
  show up as a mismatch. Writes go only to pages no one else holds;
- refcounts: each page's count is exactly the sequences whose tables hold it
  plus one if a cache node holds it, and the pool's integrity holds.

Tokens are a deterministic function of the sequence so far (`token_fn(ids)`),
so a run's outputs can be compared with `expected_output` -- a preempted and
recomputed sequence must produce the same tokens.

What it is not: a model or a timing model. Not a test module itself (no
`test_` prefix); test files import it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from scheduler.batch_scheduler import BatchScheduler, Decision, SchedulerConfig
from scheduler.kv_pool import KVPool
from scheduler.page_allocator import PageAllocator
from scheduler.prefix_cache import Node, PrefixCache
from scheduler.sampling_params import SamplingParams
from scheduler.sequence import Sequence, SeqStatus
from scheduler.window import WindowPolicy

VOCAB = 997

TokenFn = Callable[[list[int]], int]


def default_token(ids: list[int]) -> int:
    """A deterministic 'model': the next token is a hash of the whole sequence."""
    return hash(tuple(ids)) % VOCAB


def anchor_at(length: int, anchor_token: int, base: TokenFn = default_token) -> TokenFn:
    """A model that emits `anchor_token` as token number `length` (0-based), so anchor_len == length + 1."""

    def fn(ids: list[int]) -> int:
        if len(ids) == length:
            return anchor_token
        tok = base(ids)
        return tok + 1 if tok == anchor_token else tok

    return fn


def expected_output(prompt: list[int], max_tokens: int, token_fn: TokenFn = default_token) -> list[int]:
    ids = list(prompt)
    for _ in range(max_tokens):
        ids.append(token_fn(ids))
    return ids[len(prompt):]


def cache_nodes(cache: PrefixCache) -> list[Node]:
    out, stack = [], list(cache.root.children.values())
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children.values())
    return out


def check_bookkeeping(pool: KVPool, cache: PrefixCache, holders: Iterable[Sequence], holds=()) -> None:
    """Pool integrity, and every refcount explained by a sequence table, a hold (a slot's pin) or a cache
    node."""
    pool.check_integrity()
    nodes = cache_nodes(cache)
    assert cache.num_nodes == len(nodes), "num_nodes disagrees with the tree"
    held = {name: Counter() for name in pool.groups}
    cached = {name: Counter() for name in pool.groups}
    for n in nodes:
        assert len(n.key) == pool.page_size and n.depth == n.parent.depth + 1
        assert n.parent.children[n.key] is n
        if "full" in pool.groups:
            assert n.full_page is not None, "a node of a model with full layers holds no full page"
            cached["full"][n.full_page] += 1
        if n.window_page is not None:
            cached["window"][n.window_page] += 1
    for seq in [*holders, *holds]:  # a hold's Match has page tables of the same shape
        for p in seq.full_pages:
            held["full"][p] += 1
        for p in seq.window_pages:
            if p is not None:
                held["window"][p] += 1
    for name, g in pool.groups.items():
        for p, c in cached[name].items():
            assert c == 1, f"{name} page {p} held by {c} cache nodes"
            assert g.is_cached(p), f"{name} page {p} is in a node but not marked cached"
        for p in range(g.num_pages):
            assert g.is_cached(p) == (p in cached[name]), f"{name} page {p} marked cached without a node"
            want = held[name][p] + cached[name][p]
            assert g.refs(p) == want, f"{name} page {p}: {g.refs(p)} refs, tables+cache explain {want}"


@dataclass
class StepRecord:
    forward_iter: int
    num_tokens: int
    prefill_tokens: int
    decode_chunks: int
    seq_ids: list[int]
    preempted: list[int]
    released_window_pages: int


@dataclass
class Sim:
    page: int = 4
    full_pages: int | None = 64  # None: a window-only model
    window_pages: int | None = None  # None: no windowed layers
    window: int | None = None
    eviction_interval: int = 4
    anchors: bool = True
    anchor_token: int | None = None
    max_num_seqs: int = 4
    max_batched_tokens: int = 32
    max_model_len: int = 4096
    token_fn: TokenFn = default_token
    log: list[StepRecord] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    scored: dict[int, list[int]] = field(default_factory=dict)  # seq id -> prompt positions scored, in order

    def __post_init__(self) -> None:
        groups = {}
        if self.full_pages:
            groups["full"] = self.full_pages
        if self.window_pages:
            groups["window"] = self.window_pages
        self.pool = KVPool(self.page, groups)
        self.cache = PrefixCache(self.pool, self.window)
        self.alloc = PageAllocator(self.pool, self.cache)
        policy = WindowPolicy(self.window, self.page, self.eviction_interval) if self.window_pages else None
        self.config = SchedulerConfig(
            max_num_seqs=self.max_num_seqs,
            max_batched_tokens=self.max_batched_tokens,
            max_model_len=self.max_model_len,
            window=policy,
            anchors=self.anchors,
            anchor_token=self.anchor_token,
        )
        self.sched = BatchScheduler(self.config, self.alloc)
        self._next_id = 0
        self._digests: dict[int, list[int]] = {}
        # group -> page -> per-slot digest of the prefix that slot's KV came from
        self.kv: dict[str, dict[int, list[int | None]]] = {g: {} for g in self.pool.groups}

    # -- requests ------------------------------------------------------------------
    def submit(self, prompt: list[int], max_tokens: int, n: int = 1, prompt_logprobs: int | None = None
               ) -> list[Sequence]:
        params = SamplingParams(max_tokens=max_tokens, n=n, prompt_logprobs=prompt_logprobs)
        seqs, leader = [], None
        request_id = f"req-{self._next_id}"
        for i in range(n):
            seq = Sequence(self._next_id, request_id, i, list(prompt), params, leader=leader)
            self._next_id += 1
            leader = leader or seq
            self.sched.add(seq)
            seqs.append(seq)
        return seqs

    # -- one step ------------------------------------------------------------------
    def step(self) -> Decision:
        released_before = self.sched.counters.window_pages_released
        dec = self.sched.schedule()
        assert not dec.starved, f"sequences starved: {[s.seq_id for s in dec.starved]}"
        if not dec.empty:
            self._forward(dec)
            self.sched.after_step(dec)
            for seq, chunk in zip(dec.seqs, dec.batch.chunks):
                if chunk.num_scored:  # as the engine records prompt logprobs: each position once, in order
                    assert seq.scores_prompt and chunk.score_from == seq.prompt_scored, (seq.seq_id, chunk)
                    assert chunk.start <= chunk.score_from < chunk.score_to <= min(chunk.end, len(seq.prompt_ids) - 1)
                    seq.prompt_scored = chunk.score_to
                    self.scored.setdefault(seq.seq_id, []).extend(range(chunk.score_from, chunk.score_to))
            for seq, chunk in zip(dec.seqs, dec.batch.chunks):
                if not chunk.sample:
                    continue
                tok = self.token_fn(seq.all_ids)
                seq.output_ids.append(tok)
                finishing = len(seq.output_ids) >= seq.params.max_tokens
                self.sched.on_sampled(seq, tok, finishing)
                if finishing:
                    self.sched.finish(seq, "length")
                    self.finished.append(seq)
        self.log.append(StepRecord(
            forward_iter=self.sched.forward_iter,
            num_tokens=dec.batch.num_tokens,
            prefill_tokens=sum(len(c.token_ids) for c in dec.batch.chunks if not c.is_decode),
            decode_chunks=sum(1 for c in dec.batch.chunks if c.is_decode),
            seq_ids=[s.seq_id for s in dec.seqs],
            preempted=[s.seq_id for s in dec.preempted],
            released_window_pages=self.sched.counters.window_pages_released - released_before,
        ))
        self.check()
        return dec

    def abort(self, seq: Sequence) -> None:
        self.sched.abort(seq)
        self.finished.append(seq)
        self.check()

    def run_until(self, done: Callable[[], bool], max_steps: int = 5000) -> None:
        for _ in range(max_steps):
            if done():
                return
            self.step()
        raise AssertionError("condition never reached")

    def run(self, max_steps: int = 5000) -> int:
        steps = 0
        while self.sched.has_work():
            self.step()
            steps += 1
            assert steps <= max_steps, "the scheduler made no progress (livelock?)"
        return steps

    # -- checks --------------------------------------------------------------------
    def check(self) -> None:
        holders = list(self.sched.running)
        for seq in self.sched.waiting:
            assert seq.status is SeqStatus.WAITING
            assert not seq.full_pages and not seq.window_pages and seq.num_computed == 0, (
                f"waiting sequence {seq.seq_id} holds pages"
            )
        for seq in self.finished:
            assert not seq.full_pages and not seq.window_pages, f"finished sequence {seq.seq_id} holds pages"
        check_bookkeeping(self.pool, self.cache, holders, self.alloc.live_holds())

    def owned(self) -> dict[str, int]:
        return {u.group: u.owned for u in self.pool.usage()}

    def digests(self, seq: Sequence) -> list[int]:
        d = self._digests.setdefault(seq.seq_id, [])
        ids = seq.all_ids
        prev = d[-1] if d else 0
        for tok in ids[len(d):]:
            prev = hash((prev, tok))
            d.append(prev)
        return d

    def _forward(self, dec: Decision) -> None:
        batch = dec.batch
        assert batch.num_tokens <= self.max_batched_tokens, "token budget exceeded"
        assert len(self.sched.running) <= self.max_num_seqs, "seat limit exceeded"
        assert len({c.seq_id for c in batch.chunks}) == len(batch.chunks), "a sequence scheduled twice"
        for seq, chunk in zip(dec.seqs, batch.chunks):
            assert seq.status is SeqStatus.RUNNING and chunk.seq_id == seq.seq_id
            assert chunk.start == seq.num_computed, "a chunk does not start at the computed prefix"
            assert chunk.token_ids and chunk.token_ids == seq.all_ids[chunk.start:chunk.end]
            assert chunk.sample == (chunk.end == seq.num_tokens)
            self._read_and_write(seq, chunk)

    def _read_and_write(self, seq: Sequence, chunk) -> None:
        P, d = self.page, self.digests(seq)
        tables = []
        if "full" in self.pool.groups:
            tables.append(("full", chunk.full_pages, 0))
        if "window" in self.pool.groups:
            tables.append(("window", chunk.window_pages, max(0, chunk.start - self.window + 1)))
        for group, table, read_from in tables:
            g = self.pool.groups[group]
            assert len(table) * P >= chunk.end, f"{group} table does not cover the chunk"
            # Reads: the KV this chunk attends to must be this sequence's own prefix.
            for i in range(read_from // P, -(-chunk.start // P)):
                page = table[i]
                assert page is not None, f"{group} page {i} released while still in the window"
                lo, hi = max(i * P, read_from), min((i + 1) * P, chunk.start)
                slots = self.kv[group].get(page, [None] * P)[lo - i * P:hi - i * P]
                assert slots == d[lo:hi], f"seq {seq.seq_id}: {group} page {page} holds other KV for [{lo},{hi})"
            # Writes: only into pages nobody else can read.
            for pos in range(chunk.start, chunk.end):
                page = table[pos // P]
                assert page is not None, f"{group} write into a released page"
                assert g.refs(page) == 1 and not g.is_cached(page), f"{group} write into shared page {page}"
                self.kv[group].setdefault(page, [None] * P)[pos % P] = d[pos]
