"""bf16 Linear weights reordered once, at load, into oneDNN's blocked layout.

What it is for: on CPUs that multiply bf16 natively (AVX512-BF16, AMX), the
model computes in bf16, and a decode step is one-row products over every
weight, bound by how fast the weights stream from memory. torch's `F.linear`
on a row-major bf16 weight streams them at about half the rate the memory
allows; the same oneDNN kernels on a weight reordered for them
(`torch.ops.mkldnn._reorder_linear_weight`, what torch.compile's CPU backend
does to frozen weights) stream about twice as fast. Measured on an AMD EPYC
with AVX512-BF16, 2 threads, a pass over Qwen3-0.6B's per-layer weights
(28 layers, ~0.9 GB): one row 74.5 ms plain against 35.2 ms reordered, 8 rows
87.5 against 38.9, 32 rows 143 against 83, 512 rows (a prefill chunk) 1,164
against 1,078. The reordered products computed the same values in that
measurement (bf16 in, float32 accumulation, bf16 out). Served, on that
checkpoint and CPU (`python -m bench.run --only single c8 c32 --peers
anchorage llama-server`), one stream's inter-token latency went from 88 ms to
74 ms: the head (tied, below), attention and the small operators are the rest.

Why it is shaped so: the reordered weight replaces the plain one, so no
memory is spent twice; an opaque (mkldnn) tensor cannot be sliced or saved,
which nothing does after load. A head tied to the embedding is that
embedding's table too, which an opaque tensor cannot serve, and a plain copy
beside the reordered one would hold the largest tensor of a small model
twice; so `prepack_tied_head` reorders the head and leaves the lookup to the
checkpoint file (models/file_embedding.py). Measured on Qwen3-0.6B's 311 MB
head, 2 threads: one row 15.3 ms plain against 11.2 reordered, 8 rows 19.1
against 12.1, 32 rows 35.6 against 26.5, the logits bit-identical.
Only bf16 is reordered: fp16 was not measured. Where bf16 is emulated (AVX2
only), the model computes in float32 and models/split_precision.py applies
instead; `--no-prepacked-weights` opts out.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn

from models.cpu_features import native_half
from models.file_embedding import FileEmbedding, StoredTensor, readable
from models.linear_swap import swap_linears

# The row count oneDNN is told to expect: decode, the step every token pays for. Other counts still run
# on the same layout (32 and 512 rows were measured faster than the plain weight too).
EXPECTED_ROWS = 1


class PrepackedLinear(nn.Module):
    """A Linear whose weight lives in oneDNN's blocked layout."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # Plain attributes, not parameters or buffers: an opaque tensor is never loaded, saved or moved.
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), EXPECTED_ROWS)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [..., in] -> [..., out], in the weight's dtype
        lead = x.shape[:-1]
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, self.in_features), self.packed, self.bias,
                                               "none", [], "")
        return y.reshape(*lead, self.out_features)


def applies(compute: str, enabled: bool = True) -> bool:
    """Reorder when the model computes in bf16, this CPU multiplies it natively, and torch has the ops."""
    return (enabled and compute == "bfloat16" and native_half(compute)
            and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def prepack_linears(model: nn.Module) -> int:
    """Swap every Linear of a bf16 weight for a PrepackedLinear, except a head whose weight is
    shared with another module (a tied embedding). Returns how many were swapped."""
    uses = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    return swap_linears(model, PrepackedLinear,
                        lambda linear: linear.weight.dtype == torch.bfloat16 and uses[id(linear.weight)] == 1)


def prepack_tied_head(model: nn.Module, stored: StoredTensor | None) -> bool:
    """Reorder a head tied to the embedding, the embedding then reading its rows from `stored`, the
    table's place in the checkpoint file. Returns whether it did: not for an untied or non-bf16 head,
    nor when `stored` is missing, of a dtype the file lookup cannot read, or not the table's shape."""
    head, embed = model.lm_head, model.model.embed_tokens
    if not (isinstance(head, nn.Linear) and isinstance(embed, nn.Embedding) and head.weight is embed.weight
            and head.weight.dtype == torch.bfloat16 and readable(stored)
            and stored.shape == tuple(embed.weight.shape)):
        return False
    model.model.embed_tokens = FileEmbedding(stored, embed.weight.dtype)
    model.lm_head = PrepackedLinear(head)
    return True
