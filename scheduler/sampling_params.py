"""Engine-side sampling parameters: what one request asks the sampler to do.

The HTTP layer validates wire types (pydantic) and converts them here in ONE
place (`server/engine_params.py: to_sampling_params`). Everything past that seam sees
these plain, already-valid values, so the engine never re-validates and never
learns about JSON. Frozen: a request's parameters cannot change mid-flight.

Not torch: the sampler in `models/sampler.py` turns these into tensor ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


GREEDY_BELOW = 1e-5  # a temperature under this samples greedily (vLLM's _SAMPLING_EPS)


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    min_tokens: int = 0  # end ids are banned until this many tokens are out (vLLM's)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    # Stop strings: matched on the detokenized text across token boundaries,
    # never included in the output.
    stop: tuple[str, ...] = ()
    # Extra token ids that end generation (the checkpoint's EOS ids are added
    # by the engine unless ignore_eos).
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    # vLLM's: control tokens (the engine's `hidden_ids`) add no text; false keeps every token's text.
    skip_special_tokens: bool = True
    # token id -> additive bias, applied before temperature.
    logit_bias: tuple[tuple[int, float], ...] = ()
    # None = no logprobs; 0 = the chosen token's only; k = plus k alternatives.
    logprobs: int | None = None
    # Prompt logprobs (OpenAI's echo with logprobs, vLLM's prompt_logprobs): None = off; k = each prompt
    # token's logprob after the tokens before it, plus the k likeliest alternatives there.
    prompt_logprobs: int | None = None
    n: int = 1
    # llama.cpp's cache_prompt: false computes the whole prompt afresh, reusing no cached KV (clients ask
    # for it for logits that depend on nothing but the prompt); its KV is still cached for later requests.
    reuse_cache: bool = True
    # A resolved reasoning-budget plan (models/reasoning_budget.BudgetPlan) or
    # None for unrestricted. The engine builds one stateful machine per
    # sequence from it (a plan is shared by n > 1 choices, a machine is not).
    # Typed loosely to keep this module free of model-side imports.
    reasoning_budget: Any = None
    # tool_choice "required" / a named function: (tokens to force, tokens to
    # wait for first -- the reasoning closer when the prompt opened a thought,
    # tokens forced before that closer when the model ends its turn inside the
    # thought -- the reasoning budget message).
    forced_tool_call: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None
    # The grammar a tool call must fit once the model opens one (models/tool_call_grammar.py), or None.
    tool_grammar: str | None = None
    # parallel_tool_calls false: the tool grammar ends the turn after its first call.
    single_tool_call: bool = False
    # The grammar of the whole turn for response_format json_object / json_schema
    # (models/response_format_grammar.py), or None.
    response_grammar: str | None = None

    @property
    def greedy(self) -> bool:
        # Below vLLM's sampling epsilon a temperature means greedy, and dividing float32 logits by it
        # (1e-300 passes the route's `ge=0`) would overflow them to inf and make the softmax NaN.
        return self.temperature < GREEDY_BELOW or self.top_k == 1
