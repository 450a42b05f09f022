"""Wire a checkpoint folder and the settings into a running engine.

This is start-up: read the config, load weights and tokenizer, decide the pool
sizes (and refuse a window pool below its floor, naming the flag), resolve
the family's tool-call opener to the anchor token and the reasoning format,
then build runner -> pool -> prefix cache -> scheduler -> engine. What it
finds out lives in `RuntimeInfo`, separate from the settings the user gave.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from models.config import CheckpointError, ModelSpec, load_spec
from models.family_table import FamilyInfo, ReasoningFormat, anchor_description, detect_reasoning_format, load_family_table
from scheduler.batch_scheduler import BatchScheduler, SchedulerConfig
from scheduler.engine import Engine
from scheduler.kv_pool import KVPool
from scheduler.page_allocator import PageAllocator
from scheduler.pool_budget import swa_pool_floor, swa_pool_shortfall
from scheduler.prefix_cache import PrefixCache
from scheduler.window import WindowPolicy, resolve_anchor_token
from server.engine_params import generation_defaults, thought_tokens
from server.hidden_tokens import hidden_special_ids
from server.prompt_size import longest_piece_bytes
from server.settings import ServeSettings

if TYPE_CHECKING:
    from models.grammar_vocabulary import GrammarVocabulary
    from models.tool_call_grammar import CallGrammarVocabulary

log = logging.getLogger("anchorage.runtime")

DEFAULT_KV_BYTES = 2 * 2**30
MAX_DEFAULT_CONTEXT = 32768


def demo_model_dir() -> Path:
    return Path(str(resources.files("models") / "demo" / "checkpoint"))


def served_name(s: ServeSettings) -> str:
    """The model id the API reports: --served-model-name, else the folder's name (the demo's, its own). Known
    from the settings alone, so /v1/models can answer while the checkpoint still loads."""
    model_dir = Path(s.model) if s.model else demo_model_dir()
    if s.served_model_name:
        return s.served_model_name
    return "anchorage-demo" if model_dir == demo_model_dir() else model_dir.name


@dataclass
class RuntimeInfo:
    model_dir: Path
    served_model_name: str
    spec: ModelSpec
    max_model_len: int
    page_size: int
    pages: dict[str, int]
    family: FamilyInfo | None
    anchor_token: int | None
    anchor_line: str
    reasoning: ReasoningFormat | None
    chat_template: str | None
    generation_defaults: dict
    # None: no tool-call grammar for this checkpoint (models/tool_call_grammar.py says when).
    call_grammar: CallGrammarVocabulary | None = None
    # None: no grammars at all (models/grammar_vocabulary.py says when).
    grammars: GrammarVocabulary | None = None
    # The thought's opener and closer as single tokens, or None (engine_params.thought_tokens says when).
    thought_tokens: tuple[int, int] | None = None
    # Mistral's `[ARGS]` as one token (a v11 tokenizer), or None (models/tool_call_grammar.mistral_args_token).
    mistral_args: int | None = None
    # Bytes of the longest vocabulary piece, or None: no bound (server/prompt_size.py).
    longest_piece_bytes: int | None = None


def _pool_sizes(s: ServeSettings, spec: ModelSpec, max_len: int, bytes_per_token: dict[str, int]) -> dict[str, int]:
    """Pages per group. Defaults share one byte budget (DEFAULT_KV_BYTES).

    The window group gets what its floor needs plus one prefill chunk and as
    much again for cached windows, but never more than half the budget: a
    windowed layer holds a window, not a history, so extra window pages only
    serve the prefix cache. The full group gets the rest of the budget, and
    at least one `max_model_len` sequence.
    """
    page = s.page_size
    pages: dict[str, int] = {}
    budget = DEFAULT_KV_BYTES
    if spec.windowed_layers:
        window = spec.sliding_window
        floor = swa_pool_floor(s.max_num_seqs, window, page, s.swa_eviction_interval, s.anchors)
        if s.swa_pool_tokens is not None:
            short = swa_pool_shortfall(s.swa_pool_tokens, s.max_num_seqs, window, page, s.swa_eviction_interval,
                                       s.anchors, chunk=s.max_batched_tokens)
            if short:
                raise CheckpointError(short)
            tokens = s.swa_pool_tokens
        elif spec.full_layers:
            need = floor + s.max_batched_tokens + 2 * page
            tokens = max(need, min(2 * need, budget // 2 // bytes_per_token["window"]))
        else:  # every layer windowed (Mistral): this is the whole pool
            tokens = max(floor + s.max_batched_tokens + 2 * page,
                         min(1 << 20, budget // bytes_per_token["window"]))
        pages["window"] = -(-tokens // page)
        budget = max(0, budget - pages["window"] * page * bytes_per_token["window"])
    if spec.full_layers:
        tokens = s.kv_cache_tokens or max(max_len + page, min(1 << 20, budget // bytes_per_token["full"]))
        if tokens < max_len + page:
            raise CheckpointError(
                f"--kv-cache-tokens {tokens} cannot hold one sequence of --max-model-len {max_len} "
                f"(needs at least {max_len + page}); raise --kv-cache-tokens or lower --max-model-len"
            )
        pages["full"] = -(-tokens // page)
    return pages


def build_runtime(s: ServeSettings):
    """Load everything; returns (RuntimeInfo, Engine, tokenizer, runner)."""
    import torch

    from models import prepacked_linear, sampler, split_precision
    from models.cpu_features import compute_dtype
    from models.file_embedding import find_stored_tensor
    from models.loader import DTYPES, load_model, weight_files
    from models.model_runner import ModelRunner
    from models.sampling_processors import sampling_processors
    from models.grammar_vocabulary import grammar_vocabulary
    from models.response_format_grammar import ResponseGrammar
    from models.tool_call_grammar import ToolCallGrammar, call_grammar_vocabulary, mistral_args_token
    from models.token_bytes import make_token_bytes
    from models.tokenizer import load_tokenizer

    if s.threads:
        torch.set_num_threads(s.threads)
    model_dir = Path(s.model) if s.model else demo_model_dir()
    spec = load_spec(model_dir)
    tokenizer = load_tokenizer(model_dir)
    if len(tokenizer) > spec.vocab_size:
        raise CheckpointError(f"tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {spec.vocab_size}")
    compute = compute_dtype(s.compute_dtype, s.dtype)
    if compute != s.dtype:
        log.info("computing in %s: this CPU has no native %s (KV pool and slot files stay %s)", compute, s.dtype, s.dtype)
    model = load_model(model_dir, compute, spec)
    kv_dtype = DTYPES[s.dtype]
    if prepacked_linear.applies(compute, s.prepacked_weights):
        swapped = prepacked_linear.prepack_linears(model)
        log.info("%d Linear weights reordered into oneDNN's layout (--no-prepacked-weights opts out)", swapped)
        if spec.tie_word_embeddings:
            table = find_stored_tensor(weight_files(model_dir), "model.embed_tokens.weight")
            if prepacked_linear.prepack_tied_head(model, table):
                log.info("the tied head is reordered too; the embedding reads its rows from %s", table.path.name)
    if split_precision.applies(s.compute_dtype, s.dtype, compute):
        rows = split_precision.attach_half_weights(model, kv_dtype)
        if rows:
            log.info("calls of at most %d rows (decode of few sequences) use %s copies of the weights: measured "
                     "faster here at %d threads", rows, s.dtype, torch.get_num_threads())


    max_len = s.max_model_len or min(spec.max_position_embeddings, MAX_DEFAULT_CONTEXT)
    elem = torch.empty((), dtype=kv_dtype).element_size()
    per_layer = 2 * spec.num_kv_heads * spec.head_dim * elem
    bytes_per_token = {"full": per_layer * max(1, len(spec.full_layers)),
                       "window": per_layer * max(1, len(spec.windowed_layers))}
    pages = _pool_sizes(s, spec, max_len, bytes_per_token)
    runner = ModelRunner(model, s.page_size, pages, kv_dtype)

    table = load_family_table()
    family = table.family(spec.model_type)
    opener = family.tool_call_opener if family else None
    encode = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    anchor = resolve_anchor_token(opener, encode)
    anchor_line = anchor_description(spec.model_type, family, anchor)
    if not s.anchors and anchor is not None:  # the token is known, and the operator turned anchors off
        anchor_line = f"anchors: off (--no-anchors) -- token {anchor} would open a tool call"
    if not spec.windowed_layers:
        anchor_line += " (no windowed layers: nothing slides, so anchors change nothing)"
    template = getattr(tokenizer, "chat_template", None)
    reasoning = detect_reasoning_format(spec.model_type, template, table)
    if s.reasoning_budget != -1 and reasoning is not None and reasoning.kind != "markers":
        # Refused here rather than in every request: a default the format cannot honour would make each
        # request a 501, a -1 included (it falls back to the default).
        raise CheckpointError(f"--reasoning-budget {s.reasoning_budget} cannot be applied to this checkpoint: its "
                              f"{reasoning.name} reasoning format is a channel grammar, not a marker pair whose "
                              "closer the sampler can force; serve it without --reasoning-budget")
    name = served_name(s)

    pool = KVPool(s.page_size, pages)
    cache = PrefixCache(pool, spec.sliding_window)
    window = None
    if spec.windowed_layers:
        window = WindowPolicy(spec.sliding_window, s.page_size, s.swa_eviction_interval)
    sched = BatchScheduler(
        SchedulerConfig(s.max_num_seqs, s.max_batched_tokens, max_len, window, s.anchors, anchor,
                        s.ngram_draft_tokens, s.ngram_draft_max_batch),
        PageAllocator(pool, cache),
    )
    token_bytes = make_token_bytes(tokenizer)
    grammars = grammar_vocabulary(tokenizer, spec.vocab_size, spec.eos_token_ids)
    call_vocabulary = None
    if s.tool_call_grammar:
        call_vocabulary = call_grammar_vocabulary(grammars, family.tool_call_format if family else None, anchor,
                                                  encode)

    def processors(seq):
        ends = tuple(seq.params.stop_token_ids) + (() if seq.params.ignore_eos else tuple(spec.eos_token_ids))
        masks = []
        if seq.params.tool_grammar and call_vocabulary is not None:
            masks.append(ToolCallGrammar(seq.params.tool_grammar, call_vocabulary, seq.params.single_tool_call))
        if seq.params.response_grammar and grammars is not None:
            masks.append(ResponseGrammar(seq.params.response_grammar, grammars))
        return sampling_processors(seq.params.reasoning_budget, seq.params.forced_tool_call, ends, token_bytes,
                                   masks, seq.params.min_tokens)

    hidden = hidden_special_ids(tokenizer, reasoning, family.tool_call_format if family else None)
    engine = Engine(runner=runner, sampler=sampler, tokenizer=tokenizer, scheduler=sched,
                    eos_ids=spec.eos_token_ids, max_model_len=max_len, processor_factory=processors,
                    hidden_ids=hidden)
    mistral = family is not None and family.tool_call_format == "mistral"
    info = RuntimeInfo(model_dir, name, spec, max_len, s.page_size, pages, family, anchor, anchor_line,
                       reasoning, template, generation_defaults(model_dir), call_vocabulary, grammars,
                       thought_tokens(reasoning, encode), mistral_args_token(encode) if mistral else None,
                       longest_piece_bytes(tokenizer))
    log.info("model %s (%s, %d layers, %s) from %s", name, spec.architecture, spec.num_layers, s.dtype, model_dir)
    log.info("KV pool: %s pages of %d tokens; context %d", pages, s.page_size, max_len)
    log.info(anchor_line)
    return info, engine, tokenizer, runner, token_bytes
