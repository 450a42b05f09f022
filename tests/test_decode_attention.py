"""Half-precision decode attention by matmuls: as exact as SDPA, and used only where it is faster."""

import pytest
import torch
import torch.nn.functional as F

from models import paged_attention
from models.paged_attention import (HALF_MATMUL_CHUNK_KEYS, HALF_MATMUL_MAX_KEYS, decode_attention,
                                    matmul_decode_attention, rows_per_chunk)


def _inputs(b, keys, dtype, h=8, kvh=2, d=32, window=None):
    g = torch.Generator().manual_seed(b * 1000 + keys)
    q = torch.randn(b, h, d, generator=g).to(dtype)  # [B, H, D]
    k = (3 * torch.randn(b, kvh, keys, d, generator=g)).to(dtype)  # [B, KVH, L, D]; peaked scores
    v = torch.randn(b, kvh, keys, d, generator=g).to(dtype)
    mask = torch.ones(b, 1, 1, keys, dtype=torch.bool)
    mask[0, ..., keys // 2:] = False  # a shorter sequence padded to the batch's span
    if window is not None and b > 1:
        mask[-1, ..., : keys - window] = False  # a windowed row sees only its last keys
    return q, k, v, mask


def _exact(q, k, v, mask, scale):
    q, k, v = q.double(), k.double(), v.double()
    return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, scale=scale, enable_gqa=True).squeeze(2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b,keys", [(1, 64), (3, 128), (4, 37)])
def test_the_matmul_path_is_as_close_to_exact_attention_as_sdpa(dtype, b, keys):
    q, k, v, mask = _inputs(b, keys, dtype, window=16)
    scale = 32 ** -0.5
    exact = _exact(q, k, v, mask, scale)
    ours = matmul_decode_attention(q, k, v, mask, scale)
    sdpa = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, scale=scale, enable_gqa=True).squeeze(2)
    assert ours.dtype == dtype and ours.shape == q.shape
    our_err = (ours.double() - exact).abs().max().item()
    sdpa_err = (sdpa.double() - exact).abs().max().item()
    one_ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10  # at |value| near 1
    assert our_err <= max(sdpa_err, one_ulp), (our_err, sdpa_err)


def test_masked_keys_get_no_weight_even_when_their_scores_are_largest():
    q, k, v, mask = _inputs(2, 32, torch.bfloat16)
    k[0, :, 16:] = 50 * q[0].view(2, 4, 32)[:, :1].expand(2, 16, 32)  # huge scores on masked keys
    v[0, :, 16:] = 1e4
    out = matmul_decode_attention(q, k, v, mask, 32 ** -0.5)
    assert out[0].abs().max().item() < 10  # no trace of the 1e4 values


def _position_major(x: torch.Tensor) -> torch.Tensor:
    """The same values laid out as gather_pages returns them: a [B, KVH, L, D] view of [B, L, KVH, D]."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def _matmul_calls(monkeypatch) -> list:
    calls = []
    real = paged_attention.matmul_decode_attention
    monkeypatch.setattr(paged_attention, "matmul_decode_attention", lambda *a: calls.append(a) or real(*a))
    return calls


def test_full_precision_and_one_long_half_sequence_go_to_sdpa_and_the_rest_to_matmuls(monkeypatch):
    calls = _matmul_calls(monkeypatch)
    one, chunk = HALF_MATMUL_MAX_KEYS, HALF_MATMUL_CHUNK_KEYS
    for dtype, b, keys in [(torch.float32, 1, 64), (torch.float64, 3, 64),
                           (torch.bfloat16, 1, one), (torch.bfloat16, 1, one + 16),
                           (torch.bfloat16, 2, chunk), (torch.bfloat16, 2, chunk + 16)]:
        q, k, v, mask = _inputs(b, keys, dtype)
        decode_attention(q, _position_major(k), _position_major(v), mask, 0.25)
    assert [(a[0].dtype, a[1].shape[0], a[1].shape[2]) for a in calls] == [
        (torch.bfloat16, 1, one),  # one sequence: its gathered view as it is
        (torch.bfloat16, 2, chunk),  # two sequences within a chunk's span: one batched matmul over copies
        (torch.bfloat16, 1, chunk + 16), (torch.bfloat16, 1, chunk + 16)]  # longer: a sequence at a time
    assert not calls[0][1].is_contiguous()
    assert calls[1][1].is_contiguous() and calls[1][2].is_contiguous()
    assert not calls[2][1].is_contiguous()  # a row of the view, not a copy


def test_a_chunk_holds_at_most_its_key_positions_but_never_fewer_than_two_rows_within_its_span():
    assert rows_per_chunk(64) == HALF_MATMUL_CHUNK_KEYS // 64
    assert rows_per_chunk(HALF_MATMUL_CHUNK_KEYS // 2) == 2
    assert rows_per_chunk(HALF_MATMUL_CHUNK_KEYS // 2 + 16) == 2  # two rows, though past the positions
    assert rows_per_chunk(HALF_MATMUL_CHUNK_KEYS) == 2
    assert rows_per_chunk(HALF_MATMUL_CHUNK_KEYS + 16) == 1


def test_chunks_cover_every_row_once_each_cut_to_its_longest_span_and_give_the_padded_batchs_values(monkeypatch):
    keys = HALF_MATMUL_CHUNK_KEYS // 4  # four rows to a chunk
    b = 10  # two full chunks and a tail of two
    q, k, v, mask = _inputs(b, keys, torch.bfloat16)
    spans = [keys, 64, 64, 64, 128, 96, 64, 32, 16, 48]
    for row, span in enumerate(spans):
        mask[row, ..., :] = False
        mask[row, ..., :span] = True  # a row sees its own span, never the padding past it
    calls = _matmul_calls(monkeypatch)
    chunked = decode_attention(q, _position_major(k), _position_major(v), mask, 0.25, spans)
    assert [(a[0].shape[0], a[1].shape[2]) for a in calls] == [(4, keys), (4, 128), (2, 48)]
    assert all(a[1].is_contiguous() and a[2].is_contiguous() for a in calls)
    whole = matmul_decode_attention(q, k, v, mask, 0.25)
    assert (chunked.float() - whole.float()).abs().max().item() <= 2.0 ** -7  # one bf16 step at most


def test_a_sequence_at_a_time_reads_only_its_own_span_and_gives_the_padded_batchs_values(monkeypatch):
    keys = HALF_MATMUL_CHUNK_KEYS + 16  # past a chunk's span: a row at a time
    q, k, v, mask = _inputs(3, keys, torch.bfloat16)
    spans = [keys, keys // 2, 64]
    for row, span in enumerate(spans):
        mask[row, ..., span:] = False  # padding past a row's span is never visible
    calls = _matmul_calls(monkeypatch)
    by_rows = decode_attention(q, _position_major(k), _position_major(v), mask, 0.25, spans)
    assert [a[1].shape[2] for a in calls] == spans
    batched = matmul_decode_attention(q, k, v, mask, 0.25)
    assert (by_rows.float() - batched.float()).abs().max().item() <= 2.0 ** -7  # one bf16 step at most


@pytest.mark.parametrize("b,keys", [(1, 64), (3, 128), (3, 2048)])
def test_the_layout_of_the_gathered_keys_changes_no_value(b, keys):
    q, k, v, mask = _inputs(b, keys, torch.bfloat16, window=16)
    on_view = decode_attention(q, _position_major(k), _position_major(v), mask, 0.25)
    assert torch.equal(on_view, decode_attention(q, k, v, mask, 0.25))


def test_consecutive_pages_are_read_as_a_view_of_the_pool_holding_what_a_gather_would():
    pool = torch.randn(12, 4, 2, 8)  # [num_pages, page, kvh, d]
    ids = torch.tensor([[5, 6, 7]])
    view = paged_attention.read_pages(pool, ids, 5)
    gathered = paged_attention.gather_pages(pool, ids)
    assert torch.equal(view, gathered) and view.shape == gathered.shape == (1, 2, 12, 8)
    assert view.stride() == gathered.stride() and view.data_ptr() == pool[5].data_ptr()  # no copy
    chunk = paged_attention.read_pages(pool, ids[0], 5)  # a prefill chunk's pages: no batch dimension
    assert torch.equal(chunk, paged_attention.gather_pages(pool, ids[0]))


def test_only_a_lone_decode_or_a_chunk_on_consecutive_pages_is_planned_as_a_view():
    from scheduler.forward_batch import ForwardBatch, SeqChunk

    def plan(*chunks):
        return paged_attention.plan_group(ForwardBatch(list(chunks)), lambda c: c.full_pages, None, 4)

    run, scattered = [3, 4, 5], [3, 9, 5]
    assert plan(SeqChunk(0, [1], 10, run, run, True)).decode.first_page == 3
    assert plan(SeqChunk(0, [1], 10, scattered, scattered, True)).decode.first_page is None
    two = plan(SeqChunk(0, [1], 10, run, run, True), SeqChunk(1, [1], 10, [6, 7, 8], [6, 7, 8], True))
    assert two.decode.first_page is None  # a batch pads its rows to one span: gathered
    assert plan(SeqChunk(0, [1] * 6, 4, run, run, True)).prefills[0].first_page == 3
    assert plan(SeqChunk(0, [1] * 6, 4, scattered, scattered, True)).prefills[0].first_page is None
