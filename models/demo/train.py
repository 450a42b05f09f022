"""Train the built-in demo checkpoint from scratch, deterministically, on CPU.

What it is for: `python -m models.demo.train --out models/demo/checkpoint
[--seed 0] [--minutes 20]` generates the synthetic corpus, trains the
tokenizer, trains a small windowed Qwen3 with a plain torch loop and saves a
bf16 checkpoint that transformers and the anchorage server load offline.

What it is not for: general pre-training. The corpus, the schedule and the
size are tuned to one job: learn the four demo tools' agent loop in about a
quarter of an hour on two CPU cores.

Why it is shaped so: `transformers.Qwen3ForCausalLM` is the model, so the
checkpoint is a real Qwen3 with `layer_types` (layers 0 and 3 full attention,
layers 1 and 2 a 96-token window) -- the shape the server's window eviction
exists for. The run is a fixed number of steps (not "until time is up") so the
same seed gives the same weights on any machine; `--minutes` is only a
guard that stops early and says so in the model card. Loss is on assistant
tokens only (dataset.py), and the rows of a batch share the system turn,
computed once (dataset.py explains why). The step runs on `workers` processes of
one thread each, every one taking a share of the batch's rows (data_parallel.py:
at this size that beats one process on both threads); the step is the same
either way, up to float rounding.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from collections import Counter
from pathlib import Path

# Threads that spin while waiting (OpenMP's default) starve each other when the cores are shared:
# measured 5x slower training with two busy neighbours. Must be set before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from transformers import DynamicCache, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from models.demo import (banded_attention, call_weighting, corpus, data_parallel, dataset, input_noise, model_card,
                         openings, render, tokenizer_build, tools, units)

# drill_steps: at most this many steps of the copy drill first (corpus.copy_drills), ending early once its
# loss is under drill_loss; then the agent corpus (`conversations` of them, in batches of `rows`) for
# what is left of `budget` (agent_steps() says how). window / full_layers: layers 1 and 2 see 96 tokens
# back, 0 and 3 everything. A chain's second turn starts 65-80 tokens after the first thought's last
# sentence, which names the second step (corpus_reasoning.pending); at 64 no checkpoint learnt a second
# step (0 of 45 on training-distribution plans), at 96 one did for 15 of 22 chains. A temperature
# difference's second turn is 115-155 tokens away; the full last layer reaches it, but has not yet
# learnt to use it (4 of 23). budget: 3,000 ran 1,104 s in all on an AMD EPYC with AVX-512 (2026-12-05,
# two processes, alone), what 20 minutes hold with prefix_grad off (models/demo/README.md has the runs).
# prefix_grad: off, the shared system turn (~460 tokens) runs without autograd: 11% more agent steps in
# the same time at no measured cost (budget 3,000, seed 0: 107 held-out calls right and 135 answers
# without it; 109 and 136 with it, on another machine).
# threads / workers: the cores, and the data-parallel processes sharing them (data_parallel.py: at
# this size two one-thread processes outrun one two-thread process).
# check_every: agent steps between the teacher-forced held-out checks (and at the end, and on the average).
# A check is a log, not training: it changes no weight, and it costs 1.6 s of both cores (rank 1 waits at
# the next exchange). Every 200 steps that was 26 s of a run that must fit in 20 minutes; the curve it
# drew was flat from step ~1,250 (0.95-0.98).
# noise: share of the read-back assistant tokens replaced at random in agent steps (input_noise.py). Off:
# at 0.03 the thoughts that never end went from 5 and 3 (seeds 0, 2) to 1, 0 and 0 (seeds 0-2), but the
# held-out calls moved +6, +13 and -6 against the same seed without it and chat lost a case (README, run TN).
# On top of the openings (OPN, seeds 0-4): the same mean held-out calls as without it (117.4), more valid calls
# after an 8-token cut (139.4 against 135.2).
# induction_context: tokens the planted copy circuit matches on (plant_induction_circuit). 1: with 2 the held-out
# calls went 115 and 106 at seeds 0 and 1 (1: 111, 112) and valid calls after an 8-token cut fell (README, run I2).
# call_weight: the loss weight of the tool calls' tokens in agent steps (call_weighting.py); 1 is the plain mean. At 3
# the held-out calls went 120, 118 and 109 at seeds 0-2 (1: 111, 112, 114) and chat lost a case at two seeds (README, CW3).
# opening_every: agent steps between batches of `opening_rows` thought openings (openings.py), each costing
# `opening_cost` agent steps of the budget. 2: over seeds 0-4 the held-out calls went 107, 125, 125, 115, 115 (mean
# 117.4; off, seeds 0-2: 111, 112, 114), chat 20.4 of 23 (20.3), valid calls after an 8-token cut 135.2 (141 at the
# two seeds measured off). The shipped checkpoint is seed 1, picked on in-distribution cases (README, run OP2).
DEFAULTS = dict(layers=4, hidden=192, heads=6, kv_heads=2, head_dim=32, intermediate=512, window=96,
                full_layers=(0, 3),
                drill_steps=1800, drill_rows=16, drill_loss=0.3, budget=3000, drill_cost=0.5, conversations=12656,
                rows=8, lr=3e-3, warmup=30, weight_decay=0.01, drill_every=8, ema=0.99, ema_from=0.6, vocab=2048,
                tokenizer_corpus=4000, threads=2, workers=2, prefix_grad=False, check_every=1000,
                noise=0.0, induction_context=1, call_weight=1.0, opening_every=2, opening_rows=24, opening_cost=1.1)


def model_config(vocab_size: int, eos_ids: list[int], pad_id: int, cfg: dict) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=cfg["hidden"], intermediate_size=cfg["intermediate"],
        num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
        head_dim=cfg["head_dim"], max_position_embeddings=4096, tie_word_embeddings=True,
        use_sliding_window=True, sliding_window=cfg["window"],
        layer_types=["full_attention" if i in cfg["full_layers"] else "sliding_attention"
                     for i in range(cfg["layers"])],
        bos_token_id=None, eos_token_id=eos_ids[0], pad_token_id=pad_id,
    )


def _drill_lr(step: int, cfg: dict) -> float:
    """Warm-up, then flat: the drill waits for a sudden change, and decay would delay it."""
    return cfg["lr"] * min(1.0, (step + 1) / cfg["warmup"])


def agent_steps(cfg: dict, drill_run: int) -> int:
    """Agent steps after a copy drill of `drill_run` steps: what is left of `budget`, counted in agent
    steps, when a drill step costs `drill_cost` of one (measured at hidden 128: 0.23 s for 16 drill rows,
    0.44 s for 8 agent rows; at hidden 192 on a faster machine, about 0.19 s and 0.36 s).

    Why: where the drill ends is not known in advance (from random weights it was chaotic, 975 to
    past 1,800 steps for small changes of corpus or initial weights; with the planted circuit,
    plant_induction_circuit, about 140-160). With a fixed count of agent steps a late end pushed the
    run past the 20-minute guard, which then cut off the low-rate end of the schedule and the weight
    average -- the part that makes the model. Spending a fixed budget keeps the run's length, and
    the whole schedule, whatever the drill did; a late end costs agent steps, deterministically.
    """
    left = cfg["budget"] - cfg["drill_cost"] * drill_run
    if cfg["opening_every"]:  # each agent step brings 1 / opening_every of an opening step along
        left /= 1 + cfg["opening_cost"] / cfg["opening_every"]
    return max(1, round(left))


def _agent_lr(step: int, steps: int, cfg: dict) -> float:
    """Cosine from the drill's rate to a tenth of it over the `steps` agent steps."""
    progress = step / max(1, steps)
    return cfg["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _agent_plan(cfg: dict, drill_from: int, steps: int) -> list[tuple[str, int]]:
    """The agent steps, with one more copy-drill step after every `drill_every` of them.

    Why: copying is what every call needs and what this model learns last; the agent corpus alone
    copies each name a few times, the drill batch many (and it costs half an agent step). A
    ("redrill", n) step trains drill batch `drill_from + n` at the agent schedule's rate. With
    `opening_every` set, an ("opening", n) step after every that many agent steps trains openings
    batch n (openings.py) at that rate too.
    """
    plan: list[tuple[str, int]] = []
    every = cfg["opening_every"]
    for i in range(steps):
        plan.append(("agent", i))
        if cfg["drill_every"] and (i + 1) % cfg["drill_every"] == 0 and i + 1 < steps:
            plan.append(("redrill", drill_from + i // cfg["drill_every"]))
        if every and (i + 1) % every == 0 and i + 1 < steps:
            plan.append(("opening", i // every))
    return plan


def initialise(model: Qwen3ForCausalLM, seed: int, plant: bool = True, context: int = 1) -> None:
    """Draw the layers' weights from a generator of their own, the embedding's from another.

    Why: transformers draws every weight from one stream, embedding first, so any change of the
    vocabulary's size (a tokenizer change) also redraws every layer -- and, from random weights, when
    the copy drill clicked depended chaotically on those draws (anywhere from 975 steps to past the
    1,800 cap). Drawn apart, a tokenizer change leaves the layers as they were. `plant` then builds
    the copy circuit in (plant_induction_circuit). Same distributions as transformers' own
    initialisation: normal(0, initializer_range) for matrices, norms at one, the pad row zero.
    """
    std = model.config.initializer_range
    layers = torch.Generator().manual_seed(seed)
    embedding = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.model.layers.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std, generator=layers)
        table = model.model.embed_tokens
        table.weight.normal_(0.0, std, generator=embedding)
        if table.padding_idx is not None:
            table.weight[table.padding_idx].zero_()
    if plant:
        plant_induction_circuit(model, seed, context=context)


def plant_induction_circuit(model: Qwen3ForCausalLM, seed: int = 0, pairs: int = 5, gain: float = 2.5,
                            level: float = 0.06, code: float = 0.1, match_gain: float = 2.0, out_gain: float = 16.0,
                            context: int = 1) -> None:
    """Start the model with a working copy circuit: layer 0's first head moves each token to the next
    position, and layer 1's first head finds the current token among those and predicts what followed it.

    Why: copying unseen text is what every tool call needs, and a model this small learns it only
    through that two-head circuit (an induction head), which forms suddenly and late from random
    weights: the copy drill's click, anywhere from ~1,000 steps to past its 1,800-step cap, which
    decides how many agent steps the run has left. Built in from the start, the drill only has to
    tune it.

    How, within Qwen3's own weights (everything else starts as transformers draws it):
    - Residual layout: dims [0, head_dim) carry the token's code (its embedding there), dims
      [head_dim, 2 * head_dim) the previous token's code, the last dim a constant (`level` for every
      token). At the start nothing else writes into those dims, and only the planted heads read the
      constant.
    - Layer 0, head 0 (key/value head 0): its query and key read only the constant, so they are the
      same vector at every position (Qwen3 normalises q and k per head), and RoPE makes the score a
      function of distance alone: the key is the query turned by one position's angle in the `pairs`
      fastest rotary planes, so the score peaks at distance 1 (several planes, so no farther distance
      lines up as well); `gain` on those planes' q/k norm weights sharpens it (about 0.98 of the
      head's attention on the previous token). Its value is the token code, written into the
      previous-token dims. Head 1 shares this key/value head; its output is silenced (but see `context`).
    - Layer 1, head 0: its query is a projection of the token code, its key the same projection of
      the previous-token code, in the rotary planes that turn least (within the window they
      hardly turn), so a key matches where the previous token equals the current one. Its value is
      that position's own token code, written back into the token dims `out_gain` strong: the tied
      output head then favours the token that followed the last occurrence of the current one.
    - `context=2` matches two tokens, not one: layer 0's second head (it shares the first's key and
      value) takes a query turned back by one more position's angle, so it peaks at distance 2, and
      writes the token two back into dims [2 * head_dim, 3 * head_dim); layer 1's query adds a second
      projection of the previous-token code, its key the same projection of the two-back code. A
      position whose previous two tokens are the current and the previous one scores both terms, one
      that matches the current token alone half. Why: a one-token match is ambiguous wherever the
      current token occurred twice, and numbers are digits (`45.67` after `48 and `: which `4`?).
      Off by default: trained from it, the model wrote no more exactly (models/demo/README.md, run I2).
    """
    cfg = model.config
    if context not in (1, 2):
        raise ValueError(f"context must be 1 or 2 tokens, not {context}")
    if context == 2 and cfg.num_attention_heads // cfg.num_key_value_heads < 2:
        raise ValueError("context 2 needs layer 0's second head to share the first's key and value")
    d, half, hidden = cfg.head_dim, cfg.head_dim // 2, cfg.hidden_size
    tok, prev, prev2, channel = slice(0, d), slice(d, 2 * d), slice(2 * d, 3 * d), hidden - 1
    coded = context + 1  # code blocks of head_dim at the residual's start: the token and `context` before it
    inv_freq = model.model.rotary_emb.inv_freq  # [head_dim / 2]: radians per position of each plane
    g = torch.Generator().manual_seed(seed + 2)  # initialise() draws layers from seed, the embedding from seed + 1
    # The slow rotary planes, and the projection layer 1's induction head matches in: drawn before the
    # token codes, so a tokenizer change (the codes' count) leaves the layers' draws as they were.
    slow = [i for i in range(half // 2, half)] + [i + half for i in range(half // 2, half)]
    project = torch.randn(len(slow), d, generator=g) / math.sqrt(d)
    # Drawn after `project` and only for context 2, so that context 1 draws what it always drew.
    project2 = torch.randn(len(slow), d, generator=g) / math.sqrt(d) if context == 2 else None
    with torch.no_grad():
        table = model.model.embed_tokens
        table.weight[:, tok] = torch.randn(table.weight.shape[0], d, generator=g) * code
        table.weight[:, d: coded * d] = 0.0
        table.weight[:, channel] = level
        if table.padding_idx is not None:  # the pad row stays zero (and untrained), as transformers leaves it
            table.weight[table.padding_idx].zero_()
        for layer in model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            for reader in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
                reader.weight[:, channel] = 0.0
            for writer in (attn.o_proj, mlp.down_proj):
                writer.weight[channel, :] = 0.0
                writer.weight[: coded * d, :] = 0.0  # the code dims carry only what the planted heads write
        eye = torch.eye(d)
        # Layer 0: the previous-token head. [out, in] weights; a head's rows are head_dim long.
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight[: context * d] = 0.0
        attn.k_proj.weight[:d] = 0.0
        for i in range(pairs):
            angle = float(inv_freq[i])
            # Plane i is (dim i, dim i + half) (rotate_half's pairing). q = (1, 0); k = q turned by +angle,
            # so q_m . k_n = cos((n - m + 1) * angle): largest where n = m - 1.
            attn.q_proj.weight[i, channel] = 1.0
            attn.k_proj.weight[i, channel] = math.cos(angle)
            attn.k_proj.weight[i + half, channel] = math.sin(angle)
            if context == 2:
                # Head 1: q turned back by angle, so q_m . k_n = cos((n - m + 2) * angle): largest where n = m - 2.
                attn.q_proj.weight[d + i, channel] = math.cos(angle)
                attn.q_proj.weight[d + i + half, channel] = -math.sin(angle)
            for norm in (attn.q_norm, attn.k_norm):  # shared by every head
                norm.weight[i] = gain
                norm.weight[i + half] = gain
        attn.v_proj.weight[:d] = 0.0
        attn.v_proj.weight[:d, tok] = eye
        attn.o_proj.weight[prev, :d] = eye  # head 0's output -> the previous-token dims
        if context == 2:
            attn.o_proj.weight[prev2, d: 2 * d] = eye  # head 1's (its value is head 0's) -> the two-back dims
        # Layer 1: the induction head, matching in the slow rotary planes.
        attn = model.model.layers[1].self_attn
        for w in (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight):
            w[:d] = 0.0
        if context == 1:
            attn.q_proj.weight[slow, tok] = project
            attn.k_proj.weight[slow, prev] = project
        else:
            # Each match in planes of its own (the slow planes' faster half, then their slower half), so
            # no score term pairs one code with the other: a full match scores what one match scored alone
            # -- near by. At rope_theta 10,000 the faster half turns up to about 1 rad over a 96-token window
            # (the slower half 0.1), so at the window's far edge the current token's term counts less.
            own = torch.tensor([(i % half) < 3 * half // 4 for i in slow]).unsqueeze(1)  # [len(slow), 1]
            # The token code is the embedding's own (small); layer 0 writes the earlier codes from a normalised
            # input, about 1 / rms(embedding row) times larger. Scaled up to match, so the current token
            # counts as much as the previous one in the query. (The all-zero pad row is in the mean: 24.2 at
            # vocab 1,467, 23.5 without it; a 3% tilt toward the current token, left as the runs had it.)
            boost = table.weight.pow(2).mean(-1).add(1e-6).rsqrt().mean()
            attn.q_proj.weight[slow, tok] = project * own * boost
            attn.k_proj.weight[slow, prev] = project * own
            attn.q_proj.weight[slow, prev] = project2 * ~own
            attn.k_proj.weight[slow, prev2] = project2 * ~own
        for norm in (attn.q_norm, attn.k_norm):
            norm.weight[slow] = match_gain
        attn.v_proj.weight[:d, tok] = eye
        attn.o_proj.weight[tok, :d] = eye * out_gain


def _hidden(model: Qwen3ForCausalLM, batch: dataset.Batch, prefix_grad: bool = True) -> torch.Tensor:
    """Final hidden states of the batch's rows, [rows, len, hidden].

    The shared system turn runs once and every row attends to its keys and values. With `prefix_grad`
    false it runs without autograd: no gradient reaches the weights through the prefix's keys and
    values (the rows' own gradients are unchanged), and its backward -- about a fifth of a step, the
    prefix being ~460 of a rank's ~1,600 tokens -- is not run."""
    cache = None
    if batch.prefix_ids.shape[1]:
        cache = DynamicCache(config=model.config)
        with torch.set_grad_enabled(prefix_grad and torch.is_grad_enabled()):
            model.model(input_ids=batch.prefix_ids, cache=cache, use_cache=True)
        cache.batch_repeat_interleave(batch.ids.shape[0])
    return model.model(input_ids=batch.ids, cache=cache, use_cache=cache is not None).last_hidden_state


def _loss(model: Qwen3ForCausalLM, batch: dataset.Batch, over: int | None = None, prefix_grad: bool = True,
          weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean token loss of `batch`; with `over`, its summed token loss divided by `over` (a data-parallel
    rank's share of the whole batch's mean, data_parallel.py). `weights` ([rows, len], call_weighting.py)
    scale each token's loss before the sum; the divisor stays the count of trained tokens."""
    hidden = _hidden(model, batch, prefix_grad)
    trained = batch.labels != dataset.IGNORE
    logits = model.lm_head(hidden[trained])  # [trained tokens, vocab]: the head only where there is a loss
    labels = batch.labels[trained]  # [trained tokens]
    if weights is not None:
        per_token = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
        return (per_token * weights[trained]).sum() / (over if over is not None else int(trained.sum()))
    if over is None:
        return torch.nn.functional.cross_entropy(logits.float(), labels)
    return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum") / over


def _held_out_call_match(model: Qwen3ForCausalLM, batches: list[dataset.Batch], open_id: int, close_id: int
                         ) -> float:
    """Share of held-out conversations whose first tool call is predicted token for token (teacher-forced)."""
    model.eval()
    hits = total = 0
    with torch.no_grad():
        for batch in batches:
            predicted = model.lm_head(_hidden(model, batch)).argmax(-1)  # [rows, len]
            for row in range(batch.ids.shape[0]):
                ids = batch.ids[row].tolist()
                if open_id not in ids:
                    continue
                start = ids.index(open_id)
                end = ids.index(close_id, start)
                # Position t predicts token t+1: the call's tokens after <tool_call> up to </tool_call>.
                span = slice(start, end)
                hits += bool((predicted[row, span] == batch.labels[row, span]).all())
                total += 1
    model.train()
    return hits / max(1, total)


def train(out: Path, seed: int = 0, minutes: float = 20.0, **overrides) -> dict:
    cfg = {**DEFAULTS, **overrides}
    started = time.time()
    # Each rank runs on threads // workers threads; so does the preparation, so that no OpenMP threads
    # exist when the ranks are forked (data_parallel.run).
    torch.set_num_threads(max(1, cfg["threads"] // cfg["workers"]))
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    random.seed(seed)

    convs = corpus.training_conversations(seed, cfg["conversations"])
    rendered = dataset.rendered_all(convs, cfg["threads"])
    names = [row["city"] for row in tools.city_table().values()] + [w for u in units.UNITS for w in u.aliases]
    tokenizer = tokenizer_build.build_tokenizer(
        tokenizer_build.without_names([text for text, _ in rendered[: cfg["tokenizer_corpus"]]], names),
        vocab_size=cfg["vocab"], chat_template=render.chat_template())
    examples = dataset.encode_all(rendered, tokenizer)
    batches = dataset.batches(examples, tokenizer, cfg["rows"], seed)
    drills = dataset.encode_all(dataset.rendered_all(corpus.copy_drills(
        seed, cfg["drill_steps"] * cfg["drill_rows"], vocab_pieces=tokenizer_build.letter_pieces(tokenizer)),
        cfg["threads"]), tokenizer)
    drill_batches = dataset.batches(drills, tokenizer, cfg["drill_rows"], seed)
    opening_batches = (dataset.batches(openings.openings(rendered, examples, tokenizer), tokenizer,
                                       cfg["opening_rows"], seed) if cfg["opening_every"] else [])
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in (tokenizer_build.EOS, tokenizer_build.PAD)]
    watched = dataset.batches(dataset.encode_all([dataset.rendered(c) for c in corpus.held_out_conversations(64)],
                                                 tokenizer), tokenizer, 16, seed)
    call_ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>")]
    config = model_config(len(tokenizer), eos_ids, tokenizer.pad_token_id, cfg)
    model = Qwen3ForCausalLM(config)
    initialise(model, seed, context=cfg["induction_context"])
    banded_attention.use_banded_attention(model)
    params = sum(p.numel() for p in model.parameters())
    prepared = time.time()
    print(f"{len(convs)} conversations, {len(batches)} batches, vocab {len(tokenizer)}, {params:,} parameters, "
          f"data ready in {prepared - started:.0f}s, {cfg['workers']} rank(s)", flush=True)

    added = set(tokenizer.get_added_vocab().values())
    plain = torch.tensor([i for i in range(len(tokenizer)) if i not in added])  # [ordinary ids]
    run = _Run(model, cfg, batches, drill_batches, opening_batches, watched, call_ids, tokenizer.pad_token_id,
               deadline=started + minutes * 60, minutes=minutes, prepared=prepared, plain=plain, seed=seed)
    fitted = data_parallel.run(cfg["workers"], run.fit)
    trained = time.time()
    facts = {
        "seed": seed, "config": cfg, "parameters": params, "vocab_size": len(tokenizer), **fitted,
        "conversations": len(convs), "data_seconds": round(prepared - started, 1),
        "train_seconds": round(trained - prepared, 1),
        "seconds_per_step": round((trained - prepared) / max(1, fitted["steps"]), 3),
        "load_average_at_end": os.getloadavg()[0], "torch": torch.__version__,
    }
    save(model, tokenizer, eos_ids, out, facts, started)
    return facts


class _Run:
    """The training loop, as one rank runs it (`fit(rank)`; data_parallel.run starts the ranks)."""

    def __init__(self, model, cfg, batches, drill_batches, opening_batches, watched, call_ids, pad, deadline, minutes,
                 prepared, plain, seed):
        self.model, self.cfg, self.pad, self.plain, self.seed = model, cfg, pad, plain, seed
        self.batches, self.drill_batches, self.watched, self.call_ids = batches, drill_batches, watched, call_ids
        self.opening_batches = opening_batches
        self.deadline, self.minutes, self.prepared = deadline, minutes, prepared

    def _step_loss(self, batch: dataset.Batch, rank: int, world: int, agent: bool) -> torch.Tensor | None:
        """This rank's loss on `batch`; None when the batch has no row for it (a group's last, short batch)."""
        grad = self.cfg["prefix_grad"]
        mine = batch if world == 1 else data_parallel.rows_of(batch, rank, world, self.pad)
        if not mine.ids.shape[0]:
            return None
        weights = None
        if agent and self.cfg["call_weight"] != 1.0:
            weights = call_weighting.call_token_weights(mine.labels, *self.call_ids, self.cfg["call_weight"])
        over = None if world == 1 else data_parallel.trained_tokens(batch)
        return _loss(self.model, mine, over=over, prefix_grad=grad, weights=weights)

    def fit(self, rank: int) -> dict | None:
        model, cfg = self.model, self.cfg
        world = cfg["workers"]
        lead = rank == 0  # rank 0 alone prints, checks the held-out calls and keeps the weight average
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
        optim = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg["lr"], betas=(0.9, 0.95))
        model.train()
        cpu_start = time.process_time()
        losses, stopped_early, matches = [], False, {}
        # The saved weights are an exponential average over the last 40% of the agent steps: a small
        # model's held-out behaviour swings widely from step to step late in training, and the average
        # smooths that out (measured: every held-out metric equal or better than the last step's weights).
        averaged: list[torch.Tensor] | None = None
        # The drill runs until its loss is under drill_loss (with the planted circuit after ~140-160 steps;
        # from random weights it took ~1,000 to past 1,800) or until drill_steps; the rule is deterministic
        # like the rest, and every rank sees the same (summed) losses, so every rank takes it alike.
        steps = agent_steps(cfg, cfg["drill_steps"])  # if the drill runs to its cap; reset where it ends
        plan = [("drill", i) for i in range(cfg["drill_steps"])] + _agent_plan(cfg, cfg["drill_steps"], steps)
        step, agent_step = 0, 0
        parameters = list(model.parameters())
        live = [p.detach() for p in parameters]  # views: they follow the optimiser's updates
        over = False  # the guard: with several ranks, rank 0's clock decides, and the others hear it
        while step < len(plan):
            phase, i = plan[step]
            if world == 1:
                over = time.time() > self.deadline
            if over:
                stopped_early = True
                if lead:
                    print(f"stopping at step {step}: the {self.minutes}-minute guard is up", flush=True)
                break
            if phase == "drill" and i >= 100 and sum(losses[-20:]) / 20 < cfg["drill_loss"]:
                if lead:
                    print(f"step {step:5d}  the copy drill is learnt (loss {sum(losses[-20:]) / 20:.3f}); "
                          "agent corpus next", flush=True)
                steps = agent_steps(cfg, i)
                plan = plan[:step] + _agent_plan(cfg, i, steps)
                continue
            if phase == "agent":
                agent_step = i
            lr = _drill_lr(i, cfg) if phase == "drill" else _agent_lr(agent_step, steps, cfg)
            for group in optim.param_groups:
                group["lr"] = lr
            source = {"agent": self.batches, "opening": self.opening_batches}.get(phase, self.drill_batches)
            batch = source[i % len(source)]
            if phase == "agent" and cfg["noise"]:
                # Seeded by the run's seed and the step, before the rows are shared out: every rank
                # noises the same batch alike, and a seed still gives the same weights.
                gen = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
                batch = input_noise.noised(batch, cfg["noise"], self.plain, gen)
            loss = self._step_loss(batch, rank, world, phase == "agent")
            if loss is not None:
                loss.backward()
            if world == 1:
                value = loss.item()
            else:  # a rank without rows adds zero gradients
                value, stop = data_parallel.all_reduce(parameters, [loss.item() if loss is not None else 0.0,
                                                                    float(lead and time.time() > self.deadline)])
                over = stop > 0
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optim.step()
            optim.zero_grad(set_to_none=True)
            losses.append(value)
            if lead and phase == "agent" and i >= cfg["ema_from"] * steps:
                if averaged is None:
                    averaged = [p.clone() for p in live]
                else:
                    torch._foreach_lerp_(averaged, live, 1 - cfg["ema"])
            step += 1
            check = phase == "agent" and ((i + 1) % cfg["check_every"] == 0 or step == len(plan))
            if lead and (step % 50 == 1 or check):
                held_out = ""
                if check:
                    matches[step] = _held_out_call_match(model, self.watched, *self.call_ids)
                    held_out = f"  held-out call match {matches[step]:.2f}"
                elapsed, cpu = time.time() - self.prepared, time.process_time() - cpu_start
                print(f"step {step - 1:5d}  {phase} loss {sum(losses[-50:]) / len(losses[-50:]):.4f}  lr {lr:.2e}  "
                      f"{elapsed / step:.2f}s/step  cpu {cpu / step:.2f}s/step (rank 0)  {elapsed:.0f}s{held_out}",
                      flush=True)
        cpu = time.process_time() - cpu_start
        if world > 1:
            [cpu] = data_parallel.all_reduce([], [cpu])  # every rank's CPU seconds
        if not lead:
            return None
        ran = Counter(phase for phase, _ in plan[:step])  # plan[:step] is what ran, the drill's end included
        if averaged is not None:
            with torch.no_grad():
                for p, a in zip(parameters, averaged):
                    p.copy_(a)
            matches["averaged"] = _held_out_call_match(model, self.watched, *self.call_ids)
            print(f"averaged weights: held-out call match {matches['averaged']:.2f}", flush=True)
        return {
            "steps": step, "drill_steps_run": ran["drill"], "agent_steps_run": ran["agent"],
            "redrill_steps_run": ran["redrill"], "opening_steps_run": ran["opening"],
            "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])), "stopped_early": stopped_early,
            "held_out_call_match_teacher_forced": matches,
            # CPU seconds over the cores: what the training would take on an idle machine (the wall time
            # includes waiting for a core when the machine is shared).
            "cpu_seconds_per_step": round(cpu / max(1, step), 3),
            "idle_estimate_train_seconds": round(cpu / cfg["threads"], 1),
        }


def save(model, tokenizer, eos_ids: list[int], out: Path, facts: dict, started: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.set_attn_implementation("sdpa")  # training's banded attention is not a property of the checkpoint
    model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id,
                                               do_sample=False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    facts["wall_seconds"] = round(time.time() - started, 1)
    (out / "training.json").write_text(json.dumps(facts, indent=2) + "\n")
    model_card.write(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("models/demo/checkpoint"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=20.0, help="wall-clock guard; stops early if exceeded")
    parser.add_argument("--budget", type=int, default=DEFAULTS["budget"],
                        help="drill and agent steps together, counted in agent steps (agent_steps() says how)")
    parser.add_argument("--workers", type=int, default=DEFAULTS["workers"],
                        help="data-parallel processes sharing the cores (1: one process on every thread)")
    parser.add_argument("--noise", type=float, default=DEFAULTS["noise"],
                        help="share of read-back assistant tokens replaced at random in agent steps (input_noise.py)")
    parser.add_argument("--induction-context", type=int, choices=(1, 2), default=DEFAULTS["induction_context"],
                        help="tokens the planted copy circuit matches on (plant_induction_circuit)")
    parser.add_argument("--call-weight", type=float, default=DEFAULTS["call_weight"],
                        help="loss weight of the tool calls' tokens in agent steps (call_weighting.py)")
    parser.add_argument("--opening-every", type=int, default=DEFAULTS["opening_every"],
                        help="agent steps between batches of thought openings (openings.py); 0: none")
    parser.add_argument("--opening-rows", type=int, default=DEFAULTS["opening_rows"],
                        help="rows of an openings batch")
    args = parser.parse_args()
    facts = train(args.out, seed=args.seed, minutes=args.minutes, budget=args.budget, workers=args.workers,
                  noise=args.noise, induction_context=args.induction_context, call_weight=args.call_weight,
                  opening_every=args.opening_every, opening_rows=args.opening_rows)
    print(json.dumps({k: facts[k] for k in ("parameters", "steps", "final_loss", "wall_seconds")}))


if __name__ == "__main__":
    main()
