"""Attention over a paged KV pool, for a ragged batch of prefill chunks and decodes.

The pool of one layer is `k_pages, v_pages: [num_pages, page_size, n_kv_heads,
head_dim]`. A sequence owns a page table; position p lives in page
`table[p // page_size]` at offset `p % page_size`.

Shapes are planned once per step (`plan_attention`) and shared by every layer
of the same group: which pool slots the new tokens are written to, which pages
each query reads, and the boolean masks (causal, and for windowed layers
"key k is visible from query q iff k > q - window"). The decode queries of all
sequences are gathered together, their keys padded to the longest span, and
`decode_attention` attends them in one call or, in half precision, in
chunks of a few sequences or a sequence at a time on its own span; each
prefill chunk gets its own SDPA call, since its queries differ in length.

Windowed layers read only the pages covering `[start - window + 1, end)`, so a
window slide may release everything earlier without this code noticing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from scheduler.forward_batch import ForwardBatch, SeqChunk


# Half-precision decode attention (decode_attention): one sequence of at most
# HALF_MATMUL_MAX_KEYS keys by matmuls, more by SDPA; several sequences by
# batched matmuls over contiguous copies, in chunks of `rows_per_chunk` rows
# (at most HALF_MATMUL_CHUNK_KEYS key positions, rows x padded span, but two
# rows together while a span fits in it), or a row at a time past that.
# `python -m bench.attention_decode` prints every path on the machine at hand.
HALF_MATMUL_MAX_KEYS = 4096
HALF_MATMUL_CHUNK_KEYS = 2048


def rows_per_chunk(keys: int) -> int:
    """How many sequences whose keys are padded to `keys` share one batched matmul; 1 is a row at a time."""
    if keys > HALF_MATMUL_CHUNK_KEYS:
        return 1
    return max(2, HALF_MATMUL_CHUNK_KEYS // keys)


@dataclass
class ChunkPlan:
    token_slice: slice  # rows of this chunk in the flattened step
    pages: torch.Tensor  # [n_pages] page ids to gather
    mask: torch.Tensor  # [n_q, n_pages * page_size] bool, True = visible
    first_page: int | None = None  # pages[0] when the pages are consecutive ids: read as a view (read_pages)


@dataclass
class DecodePlan:
    rows: torch.Tensor  # [B] rows of the decode tokens in the flattened step
    pages: torch.Tensor  # [B, max_pages] page ids (padded with a valid id)
    mask: torch.Tensor  # [B, 1, 1, max_pages * page_size] bool
    spans: list[int]  # key positions each row really reads (its pages x page_size); the rest is padding
    first_page: int | None = None  # one row whose pages are consecutive ids: its first (read_pages)


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
            prefills.append(ChunkPlan(slice(row, row + n), torch.tensor(pages), _visible(q_pos, k_pos, window),
                                      _first_if_consecutive(pages)))
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
        decode = DecodePlan(torch.tensor(decode_rows), torch.tensor(padded), mask[:, None, None, :],
                            [len(t) * page for t in decode_tables],
                            _first_if_consecutive(decode_tables[0]) if len(decode_tables) == 1 else None)
    return GroupPlan(torch.tensor(slots, dtype=torch.long), decode, prefills)


def _first_if_consecutive(pages: list[int]) -> int | None:
    """pages[0] when the ids run pages[0], pages[0] + 1, ...; else None."""
    first = pages[0]
    if pages[-1] - first == len(pages) - 1 and all(p == first + i for i, p in enumerate(pages)):
        return first
    return None


def read_pages(pages_tensor: torch.Tensor, page_ids: torch.Tensor, first_page: int | None) -> torch.Tensor:
    """`gather_pages`, or the same tensor as a view of the pool when the ids are consecutive (`first_page`,
    first_page + 1, ...): a fresh pool hands a lone sequence its pages in order, and a long one's gather
    copied its whole KV once a layer every step (4 MiB a layer-half at 2,048 keys on the 0.6B shape).
    Same shape and strides either way, so what reads it computes the same."""
    if first_page is None:
        return gather_pages(pages_tensor, page_ids)
    n = page_ids.shape[-1]
    got = pages_tensor.narrow(0, first_page, n)  # [n, page, kvh, d], the pool's own memory
    got = got.reshape(*page_ids.shape[:-1], -1, got.shape[-2], got.shape[-1])  # [..., L, kvh, d]
    return got.transpose(-3, -2)


def gather_pages(pages_tensor: torch.Tensor, page_ids: torch.Tensor) -> torch.Tensor:
    # pages_tensor: [num_pages, page, kvh, d]; page_ids: [..., n] -> [..., kvh, n*page, d]
    got = pages_tensor[page_ids]  # [..., n, page, kvh, d]
    lead = got.shape[:-4]
    got = got.reshape(*lead, -1, got.shape[-2], got.shape[-1])  # [..., L, kvh, d]
    return got.transpose(-3, -2)


def decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
    spans: list[int] | None = None,
) -> torch.Tensor:
    """One query per sequence. q: [B, H, D]; k, v: [B, KVH, L, D]; mask: [B, 1, 1, L]; spans: the
    key positions each row really has (the rest of L is padding to the longest), None for all L.

    Returns [B, H, D]. Float32/float64 go to SDPA. In half precision PyTorch's
    CPU flash kernel is slow for a single query row, so:
    - one sequence of at most HALF_MATMUL_MAX_KEYS keys: `matmul_decode_attention`
      on K and V as gathered; longer, SDPA on contiguous copies (the float32
      copies the matmuls make cost more than they save there, and SDPA ran
      faster on copies than on the gathered view at 8,192 keys);
    - several sequences: batched matmuls over contiguous copies of K and V,
      `rows_per_chunk` rows at a time, each chunk cut to its longest span.
      Gathered from the pool (gather_pages) K and V are position-major views
      whose (batch, head) strides no single batch stride covers, and a batched
      matmul on them ran about 15 times slower than on a copy (8 sequences of
      80 keys at the 0.6B shape: 1,240 us against 83 for the scores). One
      chunk for the whole batch made float32 copies of tens of MB that ran
      slower than a row at a time; chunks of a couple of thousand key
      positions stay small enough to run fast;
    - spans past HALF_MATMUL_CHUNK_KEYS: one sequence at a time, each on its
      own span of the gathered view, as above: no copy, and no work on another
      row's padding, but a Python round per row.
    Measured as engine decode steps at the 0.6B shape (bf16, 2 cores, median
    step, the two rules alternated in one process), chunks against the
    previous rule (the whole batch in one chunk up to 4,096 positions, else a
    row at a time), sequences x prompt tokens: 32 x 128 345 against 423 ms,
    32 x 256 527 against 576, 24 x 192 379 against 485, 16 x 480 429 against
    727, 16 x 512 428 against 630, 8 x 1,000 386 against 530; the same within
    3% at 32 x 48, 8 x 128, 4 x 1,000 and 2 x 2,032.
    """
    b, keys = q.shape[0], k.shape[2]
    if q.dtype not in (torch.bfloat16, torch.float16):
        return _sdpa_decode(q, k, v, mask, scale)
    if b == 1:
        if keys <= HALF_MATMUL_MAX_KEYS:
            return matmul_decode_attention(q, k, v, mask, scale)
        return _sdpa_decode(q, k.contiguous(), v.contiguous(), mask, scale)
    spans = spans or [keys] * b
    per = rows_per_chunk(keys)
    if per == 1:
        return torch.cat([decode_attention(q[i:i + 1], k[i:i + 1, :, :n], v[i:i + 1, :, :n], mask[i:i + 1, ..., :n],
                                           scale) for i, n in enumerate(spans)])
    outs = []
    for first in range(0, b, per):
        rows = slice(first, first + per)
        n = max(spans[rows])  # this chunk's longest span; the rest of the batch's padding is not computed
        outs.append(matmul_decode_attention(q[rows], k[rows, :, :n].contiguous(), v[rows, :, :n].contiguous(),
                                            mask[rows, ..., :n], scale))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def _sdpa_decode(q, k, v, mask, scale) -> torch.Tensor:
    o = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    return o.squeeze(2)  # [B, H, D]


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
        kd = read_pages(k_pages, dp.pages, dp.first_page).to(q.dtype)  # [B, KVH, L, D]
        vd = read_pages(v_pages, dp.pages, dp.first_page).to(q.dtype)
        out[dp.rows] = decode_attention(qd, kd, vd, dp.mask, scale, dp.spans)
    for cp in plan.prefills:
        qp = q[cp.token_slice].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        kp = read_pages(k_pages, cp.pages, cp.first_page).unsqueeze(0).to(q.dtype)  # [1, KVH, L, D]
        vp = read_pages(v_pages, cp.pages, cp.first_page).unsqueeze(0).to(q.dtype)
        op = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=cp.mask, scale=scale, enable_gqa=True)
        out[cp.token_slice] = op.squeeze(0).transpose(0, 1)
    return out
