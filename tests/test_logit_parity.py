"""Our model code against transformers' own, on the same weights (issue 2 acceptance).

For each family: a ragged batch of three sequences (prompts of different
lengths, one longer than the window where there is one) is prefilled in
chunks through the page pool (page size 16), then decoded for 30 steps, all
sequences in one step each time. At every step our logits are compared with
transformers' full forward over the same tokens, and the greedy tokens with
`generate`.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from models import paged_attention
from models.loader import load_model
from models.model_runner import ModelRunner
from scheduler.forward_batch import ForwardBatch, SeqChunk

PAGE = 16
CHUNK = 20  # not a multiple of the page, so chunks straddle pages
FAMILIES = {
    "qwen3": dict(sliding_window=16, layers=3),
    "qwen2": dict(),
    "llama3": dict(),
    "mistral": dict(sliding_window=16),
    "gemma3": dict(sliding_window=16),
}


def _prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1234)
    return [torch.randint(5, vocab, (n,), generator=g).tolist() for n in (7, 37, 53)]


def _generate(ref, prompt: list[int], steps: int) -> list[int]:
    """Greedy `generate` that runs past EOS (min_new_tokens would ban EOS and
    change the argmax; we only compare the raw greedy path)."""
    cfg = copy.deepcopy(ref.generation_config)
    # An id the model can never emit: generate then runs the full `steps`.
    cfg.eos_token_id, cfg.pad_token_id, cfg.max_new_tokens, cfg.do_sample = [ref.config.vocab_size], 0, steps, False
    return ref.generate(torch.tensor([prompt]), generation_config=cfg)[0, len(prompt):].tolist()


def run_ours(model_dir, dtype: str, prompts: list[list[int]], steps: int):
    """Chunked prefill + batched decode through pages; returns (per-step logits, tokens)."""
    model = load_model(model_dir, dtype)
    runner = ModelRunner(model, PAGE, {"full": 64, "window": 64})
    tables = [list(range(i * 20, i * 20 + 20)) for i in range(len(prompts))]
    seqs = [list(p) for p in prompts]
    done = [0] * len(prompts)
    logits_log: list[list[torch.Tensor]] = [[] for _ in prompts]
    while any(done[i] < len(p) for i, p in enumerate(prompts)):
        chunks = []
        for i, p in enumerate(prompts):
            if done[i] < len(p):
                n = min(CHUNK, len(p) - done[i])
                chunks.append(SeqChunk(i, p[done[i]:done[i] + n], done[i], tables[i], tables[i], done[i] + n == len(p)))
                done[i] += n
        out = runner.step(ForwardBatch(chunks))
        for row, c in enumerate(c for c in chunks if c.sample):
            logits_log[c.seq_id].append(out[row])
            seqs[c.seq_id].append(int(out[row].argmax()))
    for _ in range(steps - 1):
        chunks = [SeqChunk(i, [s[-1]], len(s) - 1, tables[i], tables[i], True) for i, s in enumerate(seqs)]
        out = runner.step(ForwardBatch(chunks))
        for i in range(len(seqs)):
            logits_log[i].append(out[i])
            seqs[i].append(int(out[i].argmax()))
    return logits_log, [s[len(p):] for s, p in zip(seqs, prompts)]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_float32_logits_match_transformers_at_every_step(tiny_checkpoint, family):
    path = tiny_checkpoint(family, **FAMILIES[family])
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = _prompts(ref.config.vocab_size)
    steps = 30
    ours, tokens = run_ours(path, "float32", prompts, steps)
    window = getattr(ref.config, "sliding_window", None)
    if FAMILIES[family].get("sliding_window"):
        assert max(len(p) for p in prompts) > window, "one prompt must be longer than the window"
    for i, prompt in enumerate(prompts):
        with torch.no_grad():
            full = ref(torch.tensor([prompt + tokens[i]])).logits[0]  # [L, vocab]
        for step in range(steps):
            want = full[len(prompt) - 1 + step]
            got = ours[i][step]
            tol = 1e-4 * max(1.0, want.abs().max().item())
            diff = (got - want).abs().max().item()
            assert diff <= tol, f"{family} seq {i} step {step}: max |diff| {diff:.3g} > {tol:.3g}"
        assert _generate(ref, prompt, steps) == tokens[i], f"{family} seq {i}: greedy tokens differ from generate"


def _bf16_tie(ref, prefix: list[int], a: int, b: int) -> bool:
    """Are tokens a and b tied in the reference's own bf16 logits after `prefix`?

    Within two bf16 steps of each other at that magnitude, the reference's
    argmax is decided by rounding noise: transformers' own cached `generate`
    and its full forward disagree on such steps too. (One step was enough on
    one machine; on another, whose CPU kernels round differently, gemma3
    flipped at a gap of exactly two, while float32 parity held to 1e-4.)
    """
    with torch.no_grad():
        row = ref(torch.tensor([prefix])).logits[0, -1].float()
    ulp = 2.0 ** (torch.floor(torch.log2(row.abs().max())).item() - 7)
    return abs(row[a].item() - row[b].item()) <= 2 * ulp


# How many sequences share a batched matmul in decode (paged_attention.rows_per_chunk): these tiny
# prompts fit one chunk; larger steps take chunks of a few, or a sequence at a time.
ROWS_PER_CHUNK = {"one_chunk": None, "chunks_of_two": 2, "a_sequence_at_a_time": 1}


@pytest.mark.parametrize("decode", list(ROWS_PER_CHUNK))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_bfloat16_greedy_tokens_match_generate_for_20_steps(tiny_checkpoint, family, decode, monkeypatch):
    if ROWS_PER_CHUNK[decode] is not None:
        monkeypatch.setattr(paged_attention, "rows_per_chunk", lambda keys: ROWS_PER_CHUNK[decode])
    path = tiny_checkpoint(family, **FAMILIES[family])
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    prompts = _prompts(ref.config.vocab_size)
    _, tokens = run_ours(path, "bfloat16", prompts, 20)
    agreed = []  # per sequence, the steps that match generate before the first difference
    for i, prompt in enumerate(prompts):
        want = _generate(ref, prompt, 20)
        step = next((k for k, (a, b) in enumerate(zip(want, tokens[i])) if a != b), 20)
        agreed.append(step)
        if step < 20:
            assert _bf16_tie(ref, prompt + want[:step], want[step], tokens[i][step]), (
                f"{family} seq {i}: diverges from generate at step {step} without a bf16 tie")
    # Ties are rare: one sequence matches all 20 steps, or every one matches the first 10 (measured on
    # one machine's kernels: gemma3 reached ties at steps 13, 14 and 16, the other families none).
    assert max(agreed) == 20 or min(agreed) >= 10, f"{family}: steps matching generate {agreed}"


def test_greedy_output_is_varied_so_parity_means_something(tiny_checkpoint):
    path = tiny_checkpoint("qwen3", **FAMILIES["qwen3"])
    _, tokens = run_ours(path, "float32", _prompts(500), 20)
    assert all(len(set(t)) > 3 for t in tokens), tokens
