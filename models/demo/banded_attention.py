"""Windowed attention for training the demo model: each block of queries meets only the keys its window covers.

What it is for: `train.py` switches the model to `banded_attention` (`use_banded_attention`), so
the demo's sliding layers cost O(len x window) instead of O(len x (cached + len)) while training.
The full-attention layers keep transformers' own sdpa path.

What it is not for: serving or the saved checkpoint. The runtime has its own paged attention, and
train.py switches back to sdpa before saving; this computes the same function, only cheaper.

Why it is shaped so: the standard path gives a sliding layer a [len, cached + len] mask and
computes every score it masks out. Cutting the queries into blocks of `window` and giving block j
the 2 * window keys from (j - 1) * window to (j + 1) * window covers every key any of its queries
may see (HF semantics: key k is visible to query q iff q - window < k <= q), so one small mask
per block replaces the big one. Padding needs no mask: training rows are right-padded, so a real
token's window never reaches a pad key, and pad positions carry no loss. Measured on the demo
corpus: about 5% of a training step saved, the loss and gradients equal to float rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "demo_banded"


def banded_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     sliding_window: int | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query [B, H, Lq, D]; key, value [B, Hkv, Lk, D], the queries being the last Lq keys.

    Returns [B, Lq, H, D], as every transformers attention function does.
    """
    q_len = query.shape[2]
    if sliding_window is None or q_len <= sliding_window or dropout:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    window, past = sliding_window, key.shape[2] - q_len
    blocks = -(-q_len // window)
    tail = blocks * window - q_len
    q = F.pad(query, (0, 0, 0, tail)).reshape(batch, heads * blocks, window, dim)  # [B, H*blocks, W, D]
    group = heads // key.shape[1]

    def windows(x: torch.Tensor) -> torch.Tensor:  # [B, Hkv, Lk, D] -> [B, H*blocks, 2W, D]
        # Padded index p holds key p - W - past; block j's keys are padded [j*W, j*W + 2W).
        padded = F.pad(x, (0, 0, window, tail))[:, :, past:]  # [B, Hkv, (blocks + 1) * W, D]
        w = padded.unfold(2, 2 * window, window).transpose(-1, -2)  # [B, Hkv, blocks, 2W, D]
        return w.repeat_interleave(group, dim=1).reshape(batch, heads * blocks, 2 * window, dim)

    mask = _block_mask(blocks, window, past, heads, query.device)  # [1, H*blocks, W, 2W]
    out = F.scaled_dot_product_attention(q, windows(key), windows(value), attn_mask=mask, scale=scaling)
    out = out.reshape(batch, heads, blocks * window, dim)[:, :, :q_len]  # [B, H, Lq, D]
    return out.transpose(1, 2).contiguous(), None


def _block_mask(blocks: int, window: int, past: int, heads: int, device) -> torch.Tensor:
    i = torch.arange(window, device=device).view(1, window, 1)
    k = torch.arange(2 * window, device=device).view(1, 1, 2 * window)
    j = torch.arange(blocks, device=device).view(blocks, 1, 1)
    # Query i of block j is key past + j*W + i; local key k of block j is key past + (j - 1)*W + k.
    visible = (k > i) & (k <= i + window) & (past + (j - 1) * window + k >= 0)  # [blocks, W, 2W]
    return visible.unsqueeze(0).expand(heads, -1, -1, -1).reshape(1, heads * blocks, window, 2 * window)


def use_banded_attention(model) -> None:
    """Switch a transformers model to `banded_attention` (its masks built as for sdpa)."""
    AttentionInterface.register(NAME, banded_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
