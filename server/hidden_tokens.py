"""Which special tokens a generation's text leaves out: control tokens, not the markers its readers need.

What it is for: with `ignore_eos`, a `logit_bias` or a model that writes one
mid-turn, control tokens (`<|im_end|>`, `<|im_start|>`, `<|eot_id|>`, `</s>`)
are sampled like any other; kept in the text they reach clients as markup
(`"<|im_end|><|im_end|>"`). vLLM decodes with `skip_special_tokens=True` and
llama.cpp renders tokens with `special=false`, so neither shows them; nor does
this server, by default (`skip_special_tokens: false` asks for them, vLLM's
field).

Why not every special token: the output readers find thoughts and calls by
their markers in the text, and some families flag those special --
`<|python_tag|>` (Llama 3.1), `[TOOL_CALLS]` and `[ARGS]` (Mistral). vLLM turns
skipping off for those parsers; here the markers the family's readers use stay,
and only the rest is left out. A family whose thought is a channel grammar
(gpt-oss harmony) keeps all of them: its text passes through as it was written.

Not for: terminal tokens, which end a generation before they are decoded
(scheduler/engine.py), or logprobs, which name every token.
"""

from __future__ import annotations

from typing import Any

from server.output.tool_calls import known_tool_parser


def hidden_special_ids(tokenizer: Any, reasoning: Any, tool_call_format: str | None) -> frozenset[int]:
    """The special token ids a generation's text leaves out for this checkpoint."""
    if reasoning is not None and reasoning.kind != "markers":
        return frozenset()
    special = {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
    special.update(tokenizer.all_special_ids)
    # The markers the format's reader looks for (its own list: a format's name is the family table's).
    parser = known_tool_parser(tool_call_format)
    needed = set(parser.markers if parser else ())
    if reasoning is not None:
        needed.update(m for m in (reasoning.start, reasoning.end) if m)
    return frozenset(i for i in special if tokenizer.convert_ids_to_tokens(i) not in needed)
