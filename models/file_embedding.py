"""An embedding table read from the checkpoint file, row by row, instead of held in memory.

What it is for: a head tied to the embedding is one tensor used two ways. As the head it is the
largest product of a decode step (Qwen3-0.6B: 151,936 x 1,024, 311 MB in bf16), which oneDNN
streams about 1.4 times faster once the tensor is reordered into its blocked layout
(prepacked_linear.py); as the embedding it is a table indexed by token id, which a reordered tensor
cannot be. Keeping a plain copy for the lookup would hold the largest tensor twice. A step looks up
only the rows of the tokens it feeds (one per sequence in decode), so those rows are read from the
checkpoint's safetensors file -- the page cache keeps the frequent ones -- and the head alone stays
in memory, reordered (`prepacked_linear.prepack_tied_head`).

Why `pread` on an open descriptor and not a memory map: touching a mapping whose file was truncated
or rewritten in place (a training run saving over the served checkpoint) kills the process with
SIGBUS. An open descriptor keeps reading the file it opened when the path is replaced by a rename,
and a truncated file gives a short read, which fails the step with a message naming the file.

Cost, measured on Qwen3-0.6B's table (2 KB rows, page cache warm): 0.03 ms for one token, 0.05 ms
for 8, 1.6 ms for 512 and 12 ms for 4,096 distinct tokens -- a prefill chunk of that size computes for
seconds. The head's reordering saved about 4 ms per decode step (bench numbers in prepacked_linear.py).

The rows are converted to the compute dtype with `Tensor.to`, as the loader converts the whole table,
so the lookup returns exactly the values the in-memory table would hold.
"""

from __future__ import annotations

import json
import os
import struct
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

# safetensors dtype -> (how the bytes are read, what they are). bf16 has no numpy dtype: its bits are
# read as uint16 and viewed as bf16.
_STORED = {"BF16": (np.uint16, torch.bfloat16), "F16": (np.float16, torch.float16),
           "F32": (np.float32, torch.float32)}


@dataclass(frozen=True)
class StoredTensor:
    """Where a 2-D tensor's bytes sit in a safetensors file (row-major, as the format stores them)."""

    path: Path
    offset: int  # absolute byte offset of element [0, 0]
    dtype: str  # the safetensors name, e.g. "BF16"
    shape: tuple[int, ...]


def find_stored_tensor(files: list[Path], key: str) -> StoredTensor | None:
    """The location of `key` in the first of `files` whose header names it; None if none does.

    The safetensors layout: 8 bytes of little-endian header length, the JSON header, then the data,
    each tensor's `data_offsets` counting from the data's start."""
    for path in files:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        entry = header.get(key)
        if entry is not None:
            start, _ = entry["data_offsets"]
            return StoredTensor(Path(path), 8 + length + start, entry["dtype"], tuple(entry["shape"]))
    return None


def readable(stored: StoredTensor | None) -> bool:
    return stored is not None and stored.dtype in _STORED and len(stored.shape) == 2


class FileEmbedding(nn.Module):
    """`nn.Embedding`'s lookup over a table left in its checkpoint file."""

    def __init__(self, stored: StoredTensor, dtype: torch.dtype):
        super().__init__()
        if not readable(stored):
            raise ValueError(f"{stored} is not a 2-D tensor of {', '.join(_STORED)}")
        self.num_embeddings, self.embedding_dim = stored.shape
        self.dtype, self.path = dtype, stored.path
        self._read_as, self._stored_as = _STORED[stored.dtype]
        self._row_bytes = self.embedding_dim * np.dtype(self._read_as).itemsize
        self._offset = stored.offset
        self._fd = os.open(stored.path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # input_ids: [...] -> [..., embedding_dim] in self.dtype
        distinct_ids, inverse = torch.unique(input_ids.reshape(-1), sorted=True, return_inverse=True)
        distinct = distinct_ids.tolist()  # each row is read once however often its token repeats
        if distinct and (distinct[0] < 0 or distinct[-1] >= self.num_embeddings):
            raise IndexError(f"token id {distinct[0] if distinct[0] < 0 else distinct[-1]} is outside the "
                             f"embedding's {self.num_embeddings} rows")
        size = self._row_bytes
        buffer = bytearray(len(distinct) * size)
        view = memoryview(buffer)
        for j, token in enumerate(distinct):
            got = os.preadv(self._fd, [view[j * size:(j + 1) * size]], self._offset + token * size)
            if got != size:
                raise RuntimeError(f"{self.path} is shorter than when it was loaded (row {token} of the "
                                   "embedding is cut off): the checkpoint was changed under the server")
        rows = torch.from_numpy(np.frombuffer(buffer, dtype=self._read_as).reshape(len(distinct), self.embedding_dim))
        rows = rows.view(self._stored_as).to(self.dtype)  # [distinct, dim]
        picked = rows[inverse]  # [T, dim]
        return picked.reshape(*input_ids.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, read from {self.path.name}"
