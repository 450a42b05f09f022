"""The batch scheduler: which sequences run this step, with how many tokens.

Policy (continuous batching, vLLM-style):
1. Running sequences first, in admission order. A decoding sequence feeds one
   token; a sequence still prefilling gets a chunk from the per-step token
   budget (`max_batched_tokens`), so a long prompt is spread over steps and
   decodes of others keep flowing (chunked prefill, mixed with decode).
2. If a running sequence cannot get its next page, slot pins give way first
   when that makes the room (oldest first, `PageAllocator.release_holds_for`);
   otherwise the most recently admitted
   running sequence is preempted by recompute: its computed pages go into the
   prefix cache, its references are dropped, and it returns to the head of
   the waiting queue. Preemption never deadlocks: the victim is always a
   running sequence, and the pool floor checked at startup fits one sequence
   of `max_model_len` alone.
3. Then waiting sequences are admitted first-come-first-served while there is
   budget, a free seat (`max_num_seqs`) and pages -- starting from the longest
   usable cached prefix, releasing slot pins if that makes room (idle slots
   pinning the pool once left the head of the queue waiting forever). Nothing
   is admitted in a step that preempted.
4. Drafts (opt-in, `draft_tokens`): while at most `draft_max_batch` sequences
   run, a decoding sequence also feeds up to `draft_tokens` guessed tokens
   (scheduler/ngram_draft.py) -- only into pages free already, never by
   evicting or preempting anything -- and `accept_draft` counts each one the
   engine's samples agree with as computed.

The decision is a plain `ForwardBatch` plus the sequences behind its chunks;
`after_step` and `on_sampled` apply the outcome: progress, prefix caching of a
finished prompt, the window slides and tool-call anchors. No torch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from scheduler.forward_batch import ForwardBatch, SeqChunk
from scheduler.ngram_draft import propose
from scheduler.page_allocator import PageAllocator
from scheduler.sequence import Sequence, SeqStatus
from scheduler.window import SlidingRequest, WindowPolicy, decode_slide, prefill_slide


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 16
    max_batched_tokens: int = 512
    max_model_len: int = 4096
    window: WindowPolicy | None = None  # None: the model has no windowed layers
    anchors: bool = True
    anchor_token: int | None = None
    draft_tokens: int = 0  # prompt-lookup drafts per decode (0: none)
    draft_max_batch: int = 2  # draft only while at most this many sequences run


@dataclass
class Decision:
    batch: ForwardBatch
    seqs: list[Sequence]  # aligned with batch.chunks
    preempted: list[Sequence] = field(default_factory=list)
    starved: list[Sequence] = field(default_factory=list)  # cannot fit even alone

    @property
    def empty(self) -> bool:
        return not self.batch.chunks


@dataclass
class SchedulerCounters:
    preemptions: int = 0
    anchors_set: int = 0
    anchors_dropped: int = 0
    window_pages_released: int = 0
    cache_hit_tokens: int = 0
    anchor_reused_tokens: int = 0  # prompt tokens of requests whose reuse read window KV only an anchor kept
    draft_tokens: int = 0  # guessed tokens fed after decodes
    draft_accepted: int = 0  # of those, the ones the samples agreed with


class BatchScheduler:
    def __init__(self, config: SchedulerConfig, allocator: PageAllocator):
        self.config = config
        self.alloc = allocator
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = SchedulerCounters()
        self.forward_iter = 0

    # -- queue ---------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, seq: Sequence, keep_computed: bool = False) -> None:
        """Drop a sequence wherever it is; its pages are returned at once. With `keep_computed` (a client
        that left, not a failure) what it computed goes to the prefix cache first, as at a finish: llama.cpp
        keeps a cancelled slot's KV, and the client's next turn (or its slot's save) finds it."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        if keep_computed and seq.num_computed > 0:
            self.alloc.cache_prefix(seq, seq.num_computed)
        self.alloc.free(seq)
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = seq.finish_reason or "abort"

    def finish(self, seq: Sequence, reason: str) -> None:
        """A sequence is done: its computed span goes to the prefix cache, then its pages go."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.alloc.cache_prefix(seq, seq.num_computed)
        # Window pages the anchor alone kept live, now cached: from where the slide stopped, and never the
        # cache-owned prompt below the locked prefix (live whatever the slide did).
        kept_from = max(seq.released, seq.locked_prefix)
        if seq.anchor_kept_to > kept_from:
            self.alloc.cache.mark_anchor_kept(seq.all_ids[:seq.num_computed], kept_from, seq.anchor_kept_to)
        self.alloc.free(seq)
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = reason

    def _preempt(self, seq: Sequence, decision: Decision) -> None:
        self.running.remove(seq)
        self.alloc.cache_prefix(seq, seq.num_computed)
        self.alloc.free(seq)
        seq.status = SeqStatus.WAITING
        seq.preemptions += 1
        self.counters.preemptions += 1
        self.waiting.appendleft(seq)
        decision.preempted.append(seq)

    # -- one step ------------------------------------------------------------------
    def _chunk(self, seq: Sequence, n: int, drafts: list[int] = ()) -> SeqChunk:
        start = seq.num_computed
        score_from = score_to = 0
        if seq.scores_prompt:
            # Admission kept the cache from reaching past prompt_scored, so these follow on without a gap.
            score_from, score_to = max(start, seq.prompt_scored), min(start + n, len(seq.prompt_ids) - 1)
            if score_from >= score_to:
                score_from = score_to = 0
        return SeqChunk(
            seq_id=seq.seq_id,
            token_ids=seq.all_ids[start:start + n] + list(drafts),
            start=start,
            full_pages=seq.full_pages,
            window_pages=seq.window_pages,
            sample=start + n == seq.num_tokens,
            score_from=score_from,
            score_to=score_to,
            drafts=len(drafts),
        )

    def _drafts(self, seq: Sequence, budget: int) -> list[int]:
        """Guessed tokens to feed after `seq`'s next decode token, and their pages allocated; [] when drafting is
        off, the batch is too large, or the pages are not free. Capped so that every draft accepted plus the
        token sampled after them stays within max_tokens, the context and the step's budget."""
        c = self.config
        if not c.draft_tokens or len(self.running) > c.draft_max_batch:
            return []
        k = min(c.draft_tokens, seq.params.max_tokens - len(seq.output_ids) - 1,
                c.max_model_len - seq.num_tokens - 1, budget - 1)
        drafts = propose(seq.all_ids, k)
        if not drafts:
            return []
        end = seq.num_computed + 1 + len(drafts)
        if not self.alloc.can_allocate(self.alloc.needs(seq, end), evict=False):
            return []  # a guess never evicts the cache or preempts anyone
        self.alloc.allocate(seq, end)
        self.counters.draft_tokens += len(drafts)
        return drafts

    def schedule(self) -> Decision:
        decision = Decision(ForwardBatch(), [])
        budget = self.config.max_batched_tokens
        scheduled: set[int] = set()

        for seq in list(self.running):
            if seq.status is not SeqStatus.RUNNING or budget <= 0:
                continue
            n = 1 if seq.is_decoding else min(seq.remaining, budget)
            end = seq.num_computed + n
            while self.alloc.release_holds_for(self.alloc.needs(seq, end)) is None:
                victims = [s for s in self.running if s.seq_id not in scheduled]
                victim = victims[-1]
                if victim is seq and len(self.running) == 1:
                    decision.starved.append(seq)  # alone and still no room: cannot ever fit
                    break
                self._preempt(victim, decision)
                if victim is seq:
                    break
            if seq.status is not SeqStatus.RUNNING or seq in decision.starved:
                continue
            self.alloc.allocate(seq, end)
            drafts = self._drafts(seq, budget) if seq.is_decoding else []
            decision.batch.chunks.append(self._chunk(seq, n, drafts))
            decision.seqs.append(seq)
            scheduled.add(seq.seq_id)
            budget -= n + len(drafts)

        if not decision.preempted:
            self._admit(decision, budget)
        return decision

    def _leader_ready(self, seq: Sequence) -> bool:
        lead = seq.leader
        return lead is None or lead.prompt_cached or lead.status is SeqStatus.FINISHED

    def _admit(self, decision: Decision, budget: int) -> None:
        for seq in list(self.waiting):
            if budget <= 0 or len(self.running) >= self.config.max_num_seqs:
                return
            if not self._leader_ready(seq):
                continue  # a sibling waits for its leader's prompt without blocking others
            # A prompt that is scored adopts cached KV only for positions already scored (a cached
            # position produces no logits); others take the deepest match.
            limit = min(seq.num_tokens - 1, seq.prompt_scored) if seq.scores_prompt else seq.num_tokens - 1
            if not seq.params.reuse_cache and seq.leader is None:
                limit = 0  # cache_prompt false; n > 1 siblings still share their own leader's prompt
            match = self.alloc.cache.match(seq.all_ids, limit)
            self.alloc.adopt(seq, match)
            n = min(seq.remaining, budget)
            end = seq.num_computed + n
            if self.alloc.release_holds_for(self.alloc.needs(seq, end)) is None:
                self.alloc.free(seq)
                return  # FCFS: the head of the queue waits for room that running sequences will free
            self.alloc.allocate(seq, end)
            if seq.num_cached_prompt < 0:
                seq.num_cached_prompt = min(match.tokens, len(seq.prompt_ids))
                self.counters.cache_hit_tokens += seq.num_cached_prompt
                if match.through_anchor:
                    self.counters.anchor_reused_tokens += seq.num_cached_prompt
            self.waiting.remove(seq)
            seq.status = SeqStatus.RUNNING
            self.running.append(seq)
            decision.batch.chunks.append(self._chunk(seq, n))
            decision.seqs.append(seq)
            budget -= n

    # -- outcome -------------------------------------------------------------------
    def after_step(self, decision: Decision) -> None:
        """Advance progress; cache finished prompts; slide prefilling windows."""
        self.forward_iter += 1
        policy = self.config.window
        for seq, chunk in zip(decision.seqs, decision.batch.chunks):
            fed = len(chunk.token_ids) - chunk.drafts  # drafts count once accepted (accept_draft)
            seq.num_computed += fed
            # Slide before the prompt is locked below: the last chunk's history
            # past the window must go too, or it stays pinned for the whole run.
            # A one-token chunk is a decode only once the sequence has sampled:
            # a prompt fed a token at a time (a budget left at 1) is prefill.
            decode = chunk.sample and fed == 1 and bool(seq.output_ids)
            if policy is not None and not decode:
                slide = prefill_slide(self._sliding(seq, seq.num_computed), policy)
                self._apply(seq, slide)
            if not seq.prompt_cached and seq.num_computed >= len(seq.prompt_ids):
                # The prompt is in the pool: share it (n > 1 siblings, concurrent
                # requests) and keep the window before the prompt end live, where
                # a harness that drops the thinking block rejoins.
                self.alloc.cache_prefix(seq, len(seq.prompt_ids))
                seq.prompt_cached = True
                aligned = (len(seq.prompt_ids) // self.alloc.page) * self.alloc.page
                seq.locked_prefix = max(seq.locked_prefix, aligned)

    def accept_draft(self, seq: Sequence) -> None:
        """The token just sampled for `seq` is the draft fed after its previous token: that draft's KV, computed
        in the step, is the sequence's own. Call after on_sampled, one draft at a time, in order."""
        seq.num_computed += 1
        self.counters.draft_accepted += 1

    def on_sampled(self, seq: Sequence, token: int, finishing: bool) -> None:
        """A token was appended to `seq`: offer it to the anchor, slide the window."""
        policy = self.config.window
        if self.config.anchors and seq.anchor.observe(token, self.config.anchor_token, seq.num_tokens, finishing):
            self.counters.anchors_set += 1
        if len(seq.output_ids) > 1:
            seq.decode_steps += 1
        if policy is None or finishing:
            return
        slide = decode_slide(self._sliding(seq, seq.num_tokens), seq.anchor.anchor_len, policy, self.forward_iter)
        if slide is None:
            return
        if slide.drop_anchor:
            seq.anchor.clear()
            self.counters.anchors_dropped += 1
            seq.anchor_kept_to = 0  # this slide releases what the anchor held
        else:
            seq.anchor_kept_to = max(seq.anchor_kept_to, slide.anchor_kept_to)
        self._apply(seq, slide)

    def _sliding(self, seq: Sequence, position: int) -> SlidingRequest:
        return SlidingRequest(
            position=position,
            already_released=seq.released,
            locked_prefix=seq.locked_prefix,
            decode_step=seq.decode_steps,
        )

    def _apply(self, seq: Sequence, slide) -> None:
        if not slide.frees_nothing:
            self.counters.window_pages_released += self.alloc.release_window(seq, slide.free_from, slide.free_to)
