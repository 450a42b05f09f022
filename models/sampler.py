"""Turn a step's logits into tokens, one row per sampling sequence.

Per row, in order: logit bias, repetition / presence / frequency penalties,
then the logit processors (the reasoning-budget machine among them) which may
force the token outright, then the processors' token masks (the tool-call
grammar's, while a call is open), then temperature, top-k, top-p, min-p and a draw
from the sequence's own generator. Greedy rows take the argmax. A sampled
(not forced) token is then offered to each processor's optional
`substitute(token)`, which may replace it (the tool-choice forcer turns an
end of turn inside a thought into the thought's closer).

Each sequence owns a `torch.Generator` seeded from its request's `seed` (and
its choice index), and every row is processed on its own, so a seeded
request samples the same tokens whatever else shares the batch.

Logprobs (when asked) are the model's own distribution: log-softmax of the raw
logits, before bias, penalties and temperature, as vLLM reports by default.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from scheduler.sampling_params import SamplingParams


@dataclass
class SamplingState:
    """Per-sequence sampler state that lives as long as the sequence."""

    params: SamplingParams
    generator: torch.Generator
    processors: list = field(default_factory=list)  # forced_token() / accept(token), optionally substitute(token)


@dataclass
class Sampled:
    token: int
    logprob: float | None = None
    top: list[tuple[int, float]] | None = None  # (token, logprob) alternatives, best first


def generator_seed(seed: int, index: int) -> int:
    """The generator seed of choice `index` of a request seeded `seed` (any of the API's 64-bit range,
    negatives included). torch's CPU generator keeps only the low 32 bits of what it is given, so the
    request's seed is hashed down to them rather than cut: seeds 0, 2**32 and 2**63 draw differently."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def new_state(params: SamplingParams, index: int, processors: list) -> SamplingState:
    gen = torch.Generator()
    if params.seed is not None:
        gen.manual_seed(generator_seed(params.seed, index))
    else:
        gen.manual_seed(int.from_bytes(os.urandom(8), "little") & 0x7FFF_FFFF_FFFF_FFFF)
    return SamplingState(params, gen, processors)


def _penalise(row: torch.Tensor, p: SamplingParams, prompt_ids: list[int], output_ids: list[int]) -> torch.Tensor:
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(prompt_ids) | set(output_ids)), dtype=torch.long)
        if len(seen):
            vals = row[seen]
            row[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if (p.presence_penalty or p.frequency_penalty) and output_ids:
        ids = torch.tensor(output_ids, dtype=torch.long)
        counts = torch.zeros_like(row).index_add_(0, ids, torch.ones(len(ids)))
        row -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).float()
    return row


def _mask(row: torch.Tensor, processors: list) -> torch.Tensor:
    """`row` with every token some processor's `allowed_tokens()` bitmask leaves out, or its
    `banned_tokens()` names, at -inf."""
    for proc in processors:
        banned_tokens = getattr(proc, "banned_tokens", None)
        banned = [t for t in banned_tokens() if t < row.shape[0]] if banned_tokens is not None else []
        if banned:
            row = row.index_fill(0, torch.tensor(banned, dtype=torch.long), float("-inf"))
        allowed_tokens = getattr(proc, "allowed_tokens", None)
        words = allowed_tokens() if allowed_tokens is not None else None
        if words is None:
            continue
        bits = np.unpackbits(words.view(np.uint8), bitorder="little")  # [32 * words]: bit t is token t
        # The mask may be wider than the row (a tokenizer with ids past the model's vocab_size), never narrower.
        allowed = torch.from_numpy(bits[: row.shape[0]].astype(bool))
        row = row.masked_fill(~allowed, float("-inf"))
    return row


def _draw(row: torch.Tensor, p: SamplingParams, gen: torch.Generator) -> int:
    # A tiny repetition penalty or temperature can push a logit past float32's range: +inf would make
    # the whole softmax NaN (and the draw fail), so it becomes the largest finite value instead.
    scaled = torch.nan_to_num(row / p.temperature, nan=float("-inf"), posinf=torch.finfo(row.dtype).max,
                              neginf=float("-inf"))  # a masked token stays impossible
    if not bool(torch.isfinite(scaled).any()):
        return int(torch.argmax(row))  # every allowed logit fell below float32's range: the best of them
    row = scaled
    if p.top_k and p.top_k > 0 and p.top_k < row.shape[0]:
        kth = torch.topk(row, p.top_k).values[-1]
        row = row.masked_fill(row < kth, float("-inf"))
    probs = torch.softmax(row, dim=-1)
    if p.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        cum = torch.cumsum(sorted_p, dim=-1)
        drop = (cum - sorted_p) > p.top_p  # keep the smallest prefix reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
    if p.min_p > 0.0:
        probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
    return int(torch.multinomial(probs, 1, generator=gen))


SCORE_ROWS = 64


def score(
    logits: torch.Tensor,  # [k, vocab] float32: the logits at k consecutive prompt positions
    following: list[int],  # the k prompt tokens that come after those positions
    top: int,  # alternatives per position (0: none)
) -> list[tuple[float, int, list[tuple[int, float]]]]:
    """Prompt logprobs: each following token's logprob under the model's raw distribution (no penalty,
    bias, temperature or grammar: those shape choices, and a prompt token was not chosen), its rank
    there (1 + the tokens strictly likelier) and the `top` likeliest tokens, best first.

    Rows go SCORE_ROWS at a time: a prefill chunk scores up to --max-batched-tokens positions, and
    a log-softmax of them all at once would double the logits' memory (512 x 151,936 floats: 311 MB)."""
    out: list[tuple[float, int, list[tuple[int, float]]]] = []
    for start in range(0, logits.shape[0], SCORE_ROWS):
        logprobs = torch.log_softmax(logits[start:start + SCORE_ROWS], dim=-1)  # [rows, vocab]
        ids = torch.tensor(following[start:start + SCORE_ROWS], dtype=torch.long).view(-1, 1)
        chosen = logprobs.gather(1, ids)  # [rows, 1]
        ranks = ((logprobs > chosen).sum(dim=-1) + 1).tolist()
        alternatives: list[list[tuple[int, float]]] = [[] for _ in ranks]
        if top:
            vals, idx = torch.topk(logprobs, top, dim=-1)  # [rows, top]
            alternatives = [list(zip(i, v)) for i, v in zip(idx.tolist(), vals.tolist())]
        out += list(zip(chosen.view(-1).tolist(), ranks, alternatives))
    return out


def sample(
    logits: torch.Tensor,  # [S, vocab] float32
    states: list[SamplingState],
    histories: list[tuple[list[int], list[int]]],  # (prompt_ids, output_ids) per row
) -> list[Sampled]:
    out: list[Sampled] = []
    raw_logprobs = None
    if any(s.params.logprobs is not None for s in states):
        raw_logprobs = torch.log_softmax(logits, dim=-1)
    for i, st in enumerate(states):
        p = st.params
        forced = None
        for proc in st.processors:
            forced = proc.forced_token()
            if forced is not None:
                break
        if forced is not None:
            token = forced
        else:
            row = logits[i]
            if p.logit_bias or p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty:
                row = row.clone()
                for tok, bias in p.logit_bias:
                    if 0 <= tok < row.shape[0]:
                        row[tok] += bias
                row = _penalise(row, p, *histories[i])
            row = _mask(row, st.processors)
            token = int(torch.argmax(row)) if p.greedy else _draw(row, p, st.generator)
            for proc in st.processors:  # a processor may veto a sampled token by substituting its own
                substitute = getattr(proc, "substitute", None)
                if substitute is not None:
                    token = substitute(token)
        for proc in st.processors:
            proc.accept(token)
        s = Sampled(token)
        if p.logprobs is not None and raw_logprobs is not None:
            lp = raw_logprobs[i]
            s.logprob = float(lp[token])
            if p.logprobs > 0:
                vals, idx = torch.topk(lp, p.logprobs)
                s.top = [(int(t), float(v)) for t, v in zip(idx, vals)]
        out.append(s)
    return out
