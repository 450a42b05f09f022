"""Attention over a paged KV pool, for a ragged batch of prefill chunks and decodes.

The pool of one layer is `k_pages, v_pages: [num_pages, page_size, n_kv_heads,
head_dim]`. A sequence owns a page table; position p lives in page
`table[p // page_size]` at offset `p % page_size`.

Shapes are planned once per step (`plan_attention`) and shared by every layer
of the same group: which pool slots the new tokens are written to, which pages
each query reads, and the boolean masks (causal, and for windowed layers
"key k is visible from query q iff k > q - window"). Decode queries of all
sequences are batched into one call, padded to the longest key span; each
prefill chunk gets its own SDPA call, since its queries differ in length.

Windowed layers read only the pages covering `[start - window + 1, end)`, so a
window slide may release everything earlier without this code noticing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from scheduler.forward_batch import ForwardBatch, SeqChunk


# Batch size times key span up to which half-precision decode attention uses
# matmuls rather than SDPA (bench.attention_decode on 2 cores: 1x4096 keys
# 3.8x faster, 8x512 and 16x256 1.1x, 2x2048 0.9x, 8x1024 and 32x512 0.5x).
HALF_MATMUL_MAX_KEYS = 4096


@dataclass
class ChunkPlan:
    token_slice: slice  # rows of this chunk in the flattened step
    pages: torch.Tensor  # [n_pages] page ids to gather
    mask: torch.Tensor  # [n_q, n_pages * page_size] bool, True = visible


@dataclass
class DecodePlan:
    rows: torch.Tensor  # [B] rows of the decode tokens in the flattened step
    pages: torch.Tensor  # [B, max_pages] page ids (padded with a valid id)
    mask: torch.Tensor  # [B, 1, 1, max_pages * page_size] bool


@dataclass
class GroupPlan:
    """Everything one layer group (full or windowed) needs for one step."""

    write_slots: torch.Tensor  # [T] flat pool slot of every fed token
    decode: DecodePlan | None
    prefills: list[ChunkPlan]


def _key_span(chunk: SeqChunk, window: int | None, page: int) -> tuple[int, int]:
    """First page to read and number of pages, for the chunk's queries."""
    first_key = 0 if window is None else max(0, chunk.start - window + 1)
    first_page = first_key // page
    last_page = (chunk.end - 1) // page
    return first_page, last_page - first_page + 1


def _visible(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    # q_pos: [n_q], k_pos: [n_k] -> [n_q, n_k]
    vis = k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        vis &= k_pos[None, :] > (q_pos[:, None] - window)
    return vis


def plan_group(batch: ForwardBatch, table_of, window: int | None, page: int) -> GroupPlan:
    """Plan one group. `table_of(chunk)` returns that group's page table."""
    slots: list[int] = []
    decode_rows, decode_tables, decode_firsts, decode_pos = [], [], [], []
    prefills: list[ChunkPlan] = []
    row = 0
    for chunk in batch.chunks:
        table = table_of(chunk)
        for p in range(chunk.start, chunk.end):
            pid = table[p // page]
            assert pid is not None, f"seq {chunk.seq_id}: writing to a released page at {p}"
            slots.append(pid * page + p % page)
        first_page, n_pages = _key_span(chunk, window, page)
        pages = table[first_page:first_page + n_pages]
        assert None not in pages, f"seq {chunk.seq_id}: window pages needed by the step were released"
        n = len(chunk.token_ids)
        if chunk.is_decode:
            decode_rows.append(row)
            decode_tables.append(pages)
            decode_firsts.append(first_page * page)
            decode_pos.append(chunk.start)
        else:
            q_pos = torch.arange(chunk.start, chunk.end)
            k_pos = torch.arange(first_page * page, (first_page + n_pages) * page)
            prefills.append(ChunkPlan(slice(row, row + n), torch.tensor(pages), _visible(q_pos, k_pos, window)))
        row += n

    decode = None
    if decode_rows:
        width = max(len(t) for t in decode_tables)
        padded = [t + [t[0]] * (width - len(t)) for t in decode_tables]
        k_pos = torch.tensor(decode_firsts)[:, None] + torch.arange(width * page)[None, :]  # [B, L]
        q_pos = torch.tensor(decode_pos)[:, None]
        mask = k_pos <= q_pos
        if window is not None:
            mask &= k_pos > q_pos - window
        decode = DecodePlan(torch.tensor(decode_rows), torch.tensor(padded), mask[:, None, None, :])
    return GroupPlan(torch.tensor(slots, dtype=torch.long), decode, prefills)


def gather_pages(pages_tensor: torch.Tensor, page_ids: torch.Tensor) -> torch.Tensor:
    # pages_tensor: [num_pages, page, kvh, d]; page_ids: [..., n] -> [..., kvh, n*page, d]
    got = pages_tensor[page_ids]  # [..., n, page, kvh, d]
    lead = got.shape[:-4]
    got = got.reshape(*lead, -1, got.shape[-2], got.shape[-1])  # [..., L, kvh, d]
    return got.transpose(-3, -2)


def decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """One query per sequence. q: [B, H, D]; k, v: [B, KVH, L, D]; mask: [B, 1, 1, L].

    Returns [B, H, D]. SDPA, except for half-precision batches of at most
    HALF_MATMUL_MAX_KEYS key positions, where PyTorch's CPU flash kernel is
    slower for a single query row than `matmul_decode_attention`
    (`python -m bench.attention_decode` prints both); past that, the float32
    copies of K and V that the matmul path makes cost more than they save.
    """
    b, keys = q.shape[0], k.shape[2]
    if q.dtype in (torch.bfloat16, torch.float16) and b * keys <= HALF_MATMUL_MAX_KEYS:
        return matmul_decode_attention(q, k, v, mask, scale)
    o = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    return o.squeeze(2)


def matmul_decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """SDPA's flash-kernel arithmetic for one query row, by hand. Shapes as decode_attention.

    Float32 scores, float32 softmax numerators, numerators rounded to the
    value dtype (the kernel rounds them so before its P.V product), a float32
    weighted sum, and the division by the denominator last. Rounding the
    scores or the normalised weights to bf16 instead flips greedy tokens
    against transformers (logit parity tests). Each KV head's query heads
    share one matmul. Every decode row sees at least its own key, so no
    softmax row is all -inf.
    """
    b, h, d = q.shape
    kvh = k.shape[1]
    qg = q.view(b, kvh, h // kvh, d).float()  # [B, KVH, g, D]
    scores = torch.matmul(qg, k.float().transpose(-1, -2))  # [B, KVH, g, L]
    scores = scores.mul_(scale).masked_fill_(~mask, float("-inf"))
    numerators = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    denominators = numerators.sum(dim=-1, keepdim=True)  # [B, KVH, g, 1]
    rounded = numerators.to(v.dtype).float()
    out = torch.matmul(rounded, v.float()).div_(denominators)  # [B, KVH, g, D]
    return out.to(v.dtype).view(b, h, d)  # [B, H, D]


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    plan: GroupPlan,
    scale: float,
) -> torch.Tensor:
    """q: [T, H, D]; k, v: [T, KVH, D] (this step's new keys, already rotated).

    Writes k, v into the pool, then attends. Returns [T, H, D].
    """
    kvh, d = k.shape[-2], k.shape[-1]
    # The pool may hold a narrower dtype than the model computes in (bf16 KV,
    # float32 compute on CPUs without native bf16): cast on write and read.
    k_pages.view(-1, kvh, d).index_copy_(0, plan.write_slots, k.to(k_pages.dtype))
    v_pages.view(-1, kvh, d).index_copy_(0, plan.write_slots, v.to(v_pages.dtype))
    out = torch.empty_like(q)
    if plan.decode is not None:
        dp = plan.decode
        qd = q[dp.rows]  # [B, H, D]
        kd = gather_pages(k_pages, dp.pages).to(q.dtype)  # [B, KVH, L, D]
        vd = gather_pages(v_pages, dp.pages).to(q.dtype)
        out[dp.rows] = decode_attention(qd, kd, vd, dp.mask, scale)
    for cp in plan.prefills:
        qp = q[cp.token_slice].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        kp = gather_pages(k_pages, cp.pages).unsqueeze(0).to(q.dtype)  # [1, KVH, L, D]
        vp = gather_pages(v_pages, cp.pages).unsqueeze(0).to(q.dtype)
        op = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=cp.mask, scale=scale, enable_gqa=True)
        out[cp.token_slice] = op.squeeze(0).transpose(0, 1)
    return out
