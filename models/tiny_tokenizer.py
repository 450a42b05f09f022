"""Byte-level BPE tokenizers for the tiny test checkpoints, one flavour per chat format.

What it is for: `build_tokenizer(flavour, vocab_size, chat_template)` trains a
small byte-level BPE with the `tokenizers` library on a built-in corpus and wraps
it in `transformers.PreTrainedTokenizerFast`. The flavour's control tokens, the
layout of their ids and whether decoding skips them mirror the real family's
tokenizer, so server code written against real checkpoints meets the same shapes
in tests:

- Qwen (Qwen2.5 / Qwen3): markers after the BPE vocabulary. `<|endoftext|>`,
  `<|im_start|>`, `<|im_end|>` are special; `<think>`, `</think>`,
  `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>` are
  ordinary added tokens (special=False), as in the real tokenizer_config, so
  they survive `decode(skip_special_tokens=True)`.
- Llama 3.1: markers after the vocabulary, every one special (the real
  checkpoint flags all 256 reserved ids special, `<|python_tag|>` included, so
  it is skipped on decode). BOS prepended by the post-processor;
  `<|finetune_right_pad_id|>` is the pad token.
- Mistral (v3 tokenizer): `<unk>`, `<s>`, `</s>`, `[INST]`, ... at ids 0..9,
  all special (`[TOOL_CALLS]` too; that is why vLLM turns
  skip_special_tokens off for Mistral tool parsing). BOS prepended; `<unk>`
  doubles as pad, the real tokenizer having none.
- Gemma 3: `<pad>`, `<eos>`, `<bos>`, `<unk>`, `<start_of_turn>`,
  `<end_of_turn>` at the low ids, all special. BOS prepended.
- Harmony (gpt-oss): `<|start|>`, `<|channel|>`, `<|message|>`, `<|end|>`,
  `<|return|>`, `<|call|>`, `<|constrain|>` after the vocabulary, all special.

Every marker is an added token, so it encodes to exactly one id even inside
running text. Training is deterministic: the same arguments give the same
tokenizer.json bytes.

What it is not for: the vocabulary is tiny and nothing like the real one; no
test should depend on particular ids beyond the layout described above.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

DEFAULT_VOCAB_SIZE = 768


@dataclass(frozen=True)
class Flavour:
    """The control tokens of one chat format and how the tokenizer treats them."""

    leading: tuple[str, ...]  # special tokens at ids 0.. (sentencepiece-era layout)
    trailing: tuple[tuple[str, bool], ...]  # (content, special) after the BPE vocabulary
    eos: str
    pad: str
    stops: tuple[str, ...]  # every token that ends generation (generation_config)
    bos: str | None = None
    unk: str | None = None
    add_bos: bool = False  # prepend `bos` when encoding with add_special_tokens
    split_regex: str | None = None  # the family's pre-tokenizer split; None: GPT-2's
    nfc: bool = False  # NFC-normalise text first (Qwen does)


# The real pre-tokenizer splits. transformers' Qwen2Tokenizer rebuilds its
# pipeline from the vocabulary with exactly this regex and NFC, so a Qwen
# tokenizer.json with anything else would encode differently once loaded.
QWEN_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

_QWEN_MARKERS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")

FLAVOURS: dict[str, Flavour] = {
    "qwen": Flavour(
        leading=(),
        trailing=(("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True))
        + tuple((marker, False) for marker in _QWEN_MARKERS),
        eos="<|im_end|>",
        pad="<|endoftext|>",
        stops=("<|im_end|>", "<|endoftext|>"),
        split_regex=QWEN_SPLIT,
        nfc=True,
    ),
    "llama3": Flavour(
        leading=(),
        trailing=tuple(
            (token, True)
            for token in (
                "<|begin_of_text|>",
                "<|end_of_text|>",
                "<|finetune_right_pad_id|>",
                "<|start_header_id|>",
                "<|end_header_id|>",
                "<|eom_id|>",
                "<|eot_id|>",
                "<|python_tag|>",
            )
        ),
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        pad="<|finetune_right_pad_id|>",
        stops=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
        add_bos=True,
        split_regex=LLAMA3_SPLIT,
    ),
    "mistral": Flavour(
        leading=(
            "<unk>",
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ),
        trailing=(),
        bos="<s>",
        eos="</s>",
        pad="<unk>",
        unk="<unk>",
        stops=("</s>",),
        add_bos=True,
    ),
    "gemma": Flavour(
        leading=("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"),
        trailing=(),
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        unk="<unk>",
        stops=("<eos>", "<end_of_turn>"),
        add_bos=True,
    ),
    "harmony": Flavour(
        leading=(),
        trailing=tuple(
            (token, True)
            for token in (
                "<|startoftext|>",
                "<|endoftext|>",
                "<|return|>",
                "<|constrain|>",
                "<|channel|>",
                "<|start|>",
                "<|end|>",
                "<|message|>",
                "<|call|>",
            )
        ),
        bos="<|startoftext|>",
        eos="<|return|>",
        pad="<|endoftext|>",
        stops=("<|return|>", "<|endoftext|>", "<|call|>"),
        split_regex=LLAMA3_SPLIT,  # close to gpt-oss's o200k split, which is longer
    ),
}


def build_tokenizer(flavour: str, vocab_size: int | None, chat_template: str) -> PreTrainedTokenizerFast:
    """Train the flavour's tokenizer; `vocab_size` is the target total length.

    The corpus bounds what BPE can learn, so a large target is an upper bound:
    the result's `len()` is the truth and is what the model's vocab must match.
    """
    spec = FLAVOURS[flavour]
    target = vocab_size if vocab_size is not None else DEFAULT_VOCAB_SIZE
    floor = 256 + len(spec.leading) + len(spec.trailing)
    if target < floor:
        raise ValueError(f"vocab_size {target} is below {floor}: 256 bytes plus the {flavour} control tokens")

    backend = Tokenizer(models.BPE())
    if spec.split_regex is None:
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(spec.split_regex), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    if spec.nfc:
        backend.normalizer = normalizers.NFC()
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=target - len(spec.trailing),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in spec.leading],
        show_progress=False,
    )
    backend.train_from_iterator(corpus(), trainer)
    # normalized=False: a marker matches the raw text, never a byte-level rewrite of it.
    backend.add_tokens([AddedToken(t, special=special, normalized=False) for t, special in spec.trailing])
    if spec.add_bos:
        bos_id = backend.token_to_id(spec.bos)
        backend.post_processor = processors.TemplateProcessing(
            single=f"{spec.bos} $A", pair=f"{spec.bos} $A {spec.bos} $B:1", special_tokens=[(spec.bos, bos_id)]
        )
    else:
        backend.post_processor = processors.ByteLevel(trim_offsets=False)

    special_names = {"eos_token": spec.eos, "pad_token": spec.pad}
    if spec.bos is not None:
        special_names["bos_token"] = spec.bos
    if spec.unk is not None:
        special_names["unk_token"] = spec.unk
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **special_names)
    tokenizer.chat_template = chat_template
    return tokenizer


_WORDS = (
    "the model reads a request and answers with care before it calls a tool for the user "
    "weather in Paris is sunny today while London has rain and Tokyo expects snow tomorrow "
    "please check my calendar then send an email to Alice about the meeting at noon "
    "I think the answer is correct because each step follows from the previous one "
    "let me search the file system for the config and read its contents first "
    "the server streams tokens back as soon as they are sampled by the engine"
).split()

_TOOLS = ("get_weather", "search_files", "read_file", "send_email", "run_python", "get_time")
_ARGS = (
    '{"city": "Paris", "unit": "celsius"}',
    '{"query": "config.yaml", "max_results": 5}',
    '{"path": "/tmp/notes.txt"}',
    '{"to": "alice@example.com", "subject": "Meeting", "body": "See you at 12:30."}',
    '{"code": "print(sum(range(10)))"}',
    '{"timezone": "UTC", "format": "24h"}',
)

_CODE = '''def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    values = [0, 1]
    while len(values) < n:
        values.append(values[-1] + values[-2])
    return values[:n]

for i in range(3):
    print(f"step {i}: {fibonacci(i + 5)}")

const result = await fetch("/v1/chat/completions", {method: "POST", body: JSON.stringify(payload)});
if (x != null && y >= 0) { return x * y; } else { throw new Error("bad input"); }
SELECT name, count(*) FROM users WHERE age > 21 GROUP BY name;
'''

_CHAT = '''User: Hello! Can you help me plan a trip?
Assistant: Of course. Where would you like to go, and for how many days?
User: What's 17 * 23?
Assistant: 17 * 23 = 391.
System: You are a helpful assistant. Answer briefly and use tools when needed.
'''


def corpus() -> list[str]:
    """A few kilobytes of chat, numbers, JSON, code and every family's tool/thinking syntax.

    Built deterministically (no randomness), so training gives the same merges
    every time. The syntax lines teach merges for the text *around* markers;
    the markers themselves are added tokens and never split.
    """
    lines = [_CODE, _CHAT]
    for n, (left, right) in enumerate(itertools.combinations(_WORDS[:40], 2)):
        if n % 7 == 0:
            lines.append(f"{left} {right} {_WORDS[(n * 5) % len(_WORDS)]}, {n} {n * 37 % 1000}.")
    lines.append(" ".join(str(n) for n in range(0, 2000, 7)))
    lines.append(" ".join(f"{n / 8:.3f}" for n in range(64)))
    for name, args in zip(_TOOLS, _ARGS, strict=True):
        call = f'{{"name": "{name}", "arguments": {args}}}'
        lines += [
            f"<think>\nThe user wants {name}. I should call it.\n</think>\n\n<tool_call>\n{call}\n</tool_call>",
            f'<tool_response>\n{{"result": "ok", "tool": "{name}"}}\n</tool_response>',
            f'<|python_tag|>{{"name": "{name}", "parameters": {args}}}<|eom_id|>',
            f'[TOOL_CALLS] [{{"name": "{name}", "arguments": {args}, "id": "a1b2c3d4e"}}]</s>',
            f"```tool_code\n{call}\n```\n```tool_output\n{{\"status\": 200}}\n```",
            f"<|start|>assistant to=functions.{name}<|channel|>commentary json<|message|>{args}<|call|>",
            f'{{"type": "function", "function": {{"name": "{name}", "description": "Run {name}.", '
            f'"parameters": {{"type": "object", "properties": {{"x": {{"type": "string"}}}}}}}}}}',
        ]
    return lines * 2
