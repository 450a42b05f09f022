"""The demo chat template, and what of its output the model is trained on.

What it is for: rendering conversations with chat_template.jinja through
transformers' own renderer (the code `apply_chat_template` runs), and finding
the character spans of a rendered conversation the model must learn to
produce: the assistant turns after the last user query, from the end of the
generation prompt through `<|im_end|>`.

What it is not for: tokenising (train.py) or serving.

Why it is shaped so: a span is found by rendering the conversation up to a
turn with `add_generation_prompt=True` and checking that it is a prefix of
the conversation rendered through that turn. That check is the property an
agent loop relies on -- the prompt of the next request extends exactly what
the model generated -- so a template that breaks it fails here, loudly,
instead of training a model on text it will never be served.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from transformers.utils.chat_template_utils import render_jinja_template

TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")
THINK_CLOSE = "</think>"
TURN_END = "<|im_end|>"


@lru_cache(maxsize=1)
def chat_template() -> str:
    return TEMPLATE_PATH.read_text(encoding="utf-8")


def render(messages: list[dict], tools: list[dict] | None = None, *, add_generation_prompt: bool = False,
           enable_thinking: bool = True) -> str:
    rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=chat_template(),
                                        add_generation_prompt=add_generation_prompt,
                                        enable_thinking=enable_thinking)
    return rendered[0]


def trained_spans(messages: list[dict], tools: list[dict] | None, enable_thinking: bool = True,
                  untrained_reasoning: frozenset[int] = frozenset(), context_only: frozenset[int] = frozenset()
                  ) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the [start, end) character spans the model is trained to generate.

    A span starts after the generation prompt (`<|im_start|>assistant\\n<think>\\n`) -- or, for a thought
    in `untrained_reasoning` (cut short as a reasoning budget would), after its `</think>` -- and ends
    after `<|im_end|>`; the newline the template puts after it is not generated. Messages in
    `context_only` (a call turn whose reasoning the client did not pass back) get no span.
    """
    full = render(messages, tools, enable_thinking=enable_thinking)
    last_query = max(i for i, m in enumerate(messages) if m["role"] == "user")
    spans = []
    for i in range(last_query + 1, len(messages)):
        if messages[i]["role"] != "assistant" or i in context_only:
            continue
        prompt = render(messages[:i], tools, add_generation_prompt=True, enable_thinking=enable_thinking)
        through = render(messages[: i + 1], tools, enable_thinking=enable_thinking)
        if not (through.startswith(prompt) and full.startswith(through) and through.endswith(TURN_END + "\n")):
            raise ValueError(f"message {i} does not extend its generation prompt; the template is inconsistent")
        start, end = len(prompt), len(through) - 1
        if i in untrained_reasoning:
            start = through.index(THINK_CLOSE, start) + len(THINK_CLOSE)
        spans.append((start, end))
    return full, spans
