"""transformers' `generate` in-process, batched statically: the baseline with no server.

A static batch is what `generate` offers for many requests: left-pad every
prompt to the longest, decode until the longest output is done, and count
for each request only the tokens it asked for (the rest of its row is work
a static batch wastes, which is what continuous batching saves). A logits
processor stamps the wall clock at every decode step, which gives each
request's time to first token (the batch's prefill), its inter-token gaps
and its end (the step that produced its last wanted token), in the same
`StreamResult` shape the HTTP load generator fills.

Not for: anything over HTTP (`transformers serve` is a peer in bench.peers).
"""

from __future__ import annotations

import copy
import time

import torch

from bench.loadgen import StreamResult


def load(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()


class _StepClock:
    """A logits processor that records when each decode step's logits are ready."""

    def __init__(self):
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def static_batch(model, prompts: list[list[int]], outputs: list[int], pad_id: int = 0) -> tuple[list[StreamResult], float]:
    """Generate `outputs[i]` greedy tokens for each prompt in one padded batch; (results, wall seconds)."""
    from transformers import LogitsProcessorList

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):  # left padding: every row's last prompt token is aligned
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    cfg = copy.deepcopy(model.generation_config)
    # An EOS id no sampled token can equal: every row runs to max_new_tokens.
    cfg.eos_token_id, cfg.pad_token_id = [model.config.vocab_size], pad_id
    cfg.max_new_tokens, cfg.min_new_tokens, cfg.do_sample = max(outputs), None, False
    clock = _StepClock()
    t0 = time.perf_counter()
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg,
                       logits_processor=LogitsProcessorList([clock]))
    wall = time.perf_counter() - t0
    results = []
    for n in outputs:
        times = clock.times[:n]
        results.append(StreamResult(start=t0, first=times[0], end=times[-1], event_times=list(times), events=n,
                                    completion_tokens=n, prompt_tokens=None))
    # The batch is over when its longest row is; a shorter row's tokens were
    # ready earlier, but a static batch returns them all at the end.
    return results, wall
