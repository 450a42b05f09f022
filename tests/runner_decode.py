"""Greedy decoding of one sequence straight on a ModelRunner, for tests that compare two ways of computing.

The sequence prefills `prompt` in one chunk, then decodes `steps` tokens one by one, always in pages 0-7
of both pools (the runners under test are built with at least 8 pages of 16 tokens each).
"""

from __future__ import annotations

import torch

from scheduler.forward_batch import ForwardBatch, SeqChunk


def greedy_decode(runner, prompt: list[int], steps: int) -> tuple[torch.Tensor, list[int]]:
    """Logits [steps + 1, vocab] of every sampled position, and the prompt followed by the greedy tokens."""
    table = list(range(8))
    logits = [runner.step(ForwardBatch([SeqChunk(0, prompt, 0, table, table, True)]))[0]]
    seq = prompt + [int(logits[-1].argmax())]
    for _ in range(steps):
        logits.append(runner.step(ForwardBatch([SeqChunk(0, [seq[-1]], len(seq) - 1, table, table, True)]))[0])
        seq.append(int(logits[-1].argmax()))
    return torch.stack(logits), seq
