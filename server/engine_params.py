"""`to_sampling_params`: the ONE place where wire types become engine types.

Everything a route validated (pydantic, server/protocol) is turned here into a
frozen `SamplingParams`: defaults filled (the checkpoint's
generation_config.json first, as vLLM does, then OpenAI's), the reasoning
budget resolved against the tokenizer and the rendered prompt (seed 001: a
budget is *requested* until this seam makes it a plan), `tool_choice` turned
into a forced call prefix, `tools` into the grammar a call must fit, and checks that need the model (token ids within
the vocabulary, the prompt within the context) raised as typed API errors.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from models.reasoning_plan import UnsupportedReasoningBudget, effective_budget, resolve_plan, unsupported_reason
from models.response_format_grammar import TurnCalls, response_grammar, value_grammar
from models.tool_call_grammar import MISTRAL_ARGS, call_blocks, call_grammar
from scheduler.sampling_params import SamplingParams
from server.errors import ExceedContextSizeError, InvalidRequestError, NotSupportedError
from server.protocol.json_schema_check import schema_problem
from server.protocol.json_schema_ending import never_ending_part

log = logging.getLogger(__name__)

# Call prefixes per tool-call format: (opener only, opener + named function).
_CALL_PREFIX = {
    "hermes": ("<tool_call>\n", '<tool_call>\n{{"name": "{name}", "arguments": '),
    "llama3_json": ('{"name": "', '{{"name": "{name}", "parameters": '),
    "mistral": ("[TOOL_CALLS]", '[TOOL_CALLS][{{"name": "{name}", "arguments": '),
}

# Mistral v11 tokenizers (an `[ARGS]` token) write `[TOOL_CALLS]name[ARGS]{...}` instead of the list.
_MISTRAL_V11_NAMED = "[TOOL_CALLS]{name}" + MISTRAL_ARGS


def generation_defaults(model_dir: Path) -> dict:
    path = Path(model_dir) / "generation_config.json"
    try:
        cfg = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}
    keys = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
    out = {k: cfg[k] for k in keys if isinstance(cfg.get(k), int | float)}
    if cfg.get("do_sample") is False:
        out["temperature"] = 0.0
    return out


def check_context(n_prompt: int, n_ctx: int, param: str = "messages") -> None:
    if n_prompt >= n_ctx:
        raise ExceedContextSizeError(n_prompt, n_ctx, param=param)


def _budget_plan(req, state, prompt_text: str, reasoning_open: bool = False):
    info, s = state.info, state.settings
    budget = effective_budget(req.reasoning_budget_tokens, s.reasoning_budget)
    if budget != -1:
        why = unsupported_reason(info.reasoning)
        if why:
            raise NotSupportedError(why, param="reasoning_budget_tokens")
    encode = lambda text: state.tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    opener = info.family.tool_call_opener if info.family else None
    try:
        return resolve_plan(budget, info.reasoning, prompt_text, encode, s.reasoning_budget_message, opener,
                            opened=reasoning_open)
    except UnsupportedReasoningBudget as exc:
        raise NotSupportedError(str(exc), param="reasoning_budget_tokens") from None


def _forced_tool_call(req, state, reasoning_open: bool):
    choice = getattr(req, "tool_choice", None)
    if choice is None or choice in ("auto", "none") or not req.tools:
        return None
    info = state.info
    fmt = info.family.tool_call_format if info.family else None
    if fmt not in _CALL_PREFIX:
        raise NotSupportedError(
            f"tool_choice {choice if isinstance(choice, str) else 'with a named function'} needs a known "
            f"tool-call format, and this checkpoint's family ({info.spec.model_type}) has none", param="tool_choice")
    bare, named = _CALL_PREFIX[fmt]
    encode = lambda t: tuple(state.tokenizer.encode(t, add_special_tokens=False))  # noqa: E731
    if fmt == "mistral" and info.mistral_args is not None:
        named = _MISTRAL_V11_NAMED  # a v11 tokenizer: its model names the function before [ARGS]
    text = bare if isinstance(choice, str) else named.format(name=choice.function.name)
    if fmt == "llama3_json" and _json_response_schema(req) is not None:
        # The JSON answer is JSON too: a JSON-answer turn's calls follow the opener, `<|python_tag|>` (call_blocks).
        text = info.family.tool_call_opener + text
    wait: tuple[int, ...] = ()
    message: tuple[int, ...] = ()
    if reasoning_open and info.reasoning is not None and info.reasoning.end:
        wait = encode(info.reasoning.end)
        text = "\n\n" + text  # the templates' separator after a closed thought
        # A thought the forcer closes ends as a budget-closed one does (tool_choice_forcer.py).
        message = encode(state.settings.reasoning_budget_message or "")
    return encode(text), wait, message


def _offered_tools(req) -> list[dict]:
    """The tools a call may use: all of them, only the named one for a named tool_choice, none for
    tool_choice "none"."""
    tools = getattr(req, "tools", None)
    choice = getattr(req, "tool_choice", None)
    if not tools or choice == "none":
        return []
    offered = [tool.model_dump(exclude_none=True) for tool in tools]
    if choice is not None and not isinstance(choice, str):
        offered = [tool for tool in offered if tool["function"]["name"] == choice.function.name]
    return offered


def refuse_invalid_tool_parameters(req) -> None:
    """A 400 for the first tool whose `parameters` is no JSON schema (OpenAI's wording and code), each tool
    checked once. Called on the tokenizer thread with the prompt, not while the body is parsed: the
    meta-schema walk takes seconds for a schema of megabytes, which held every other request on the loop."""
    for i, tool in enumerate(getattr(req, "tools", None) or ()):
        parameters = tool.function.parameters
        problem = schema_problem(parameters) or never_ending_part(parameters) if parameters is not None else None
        if problem is not None:
            raise InvalidRequestError(f"Invalid schema for function '{tool.function.name}': {problem}",
                                      param=f"tools.{i}.function.parameters", code="invalid_function_parameters")


def _json_response_schema(req) -> dict | None:
    fmt = getattr(req, "response_format", None)
    return fmt.schema_for_answer() if fmt is not None else None


def _tool_grammar(req, state) -> str | None:
    """The grammar the request's calls must fit: its tools (only the named one, for a named
    tool_choice). None when the checkpoint has no call grammar (or `--no-tool-call-grammar`), the
    request offers no tools or says tool_choice "none", or llguidance cannot compile a schema
    (logged; the call is then unconstrained, as before grammars)."""
    vocabulary = state.info.call_grammar
    offered = _offered_tools(req)
    if vocabulary is None or not offered or _json_response_schema(req) is not None:
        return None  # (a JSON response_format's grammar constrains the whole turn, calls included)
    grammar = call_grammar(offered, vocabulary, _single_call(req))
    error = vocabulary.grammars.error(grammar)
    if error is not None:
        choice = req.tool_choice
        if choice == "required" or (choice is not None and not isinstance(choice, str)):
            # A forced call is the grammar's to keep to the offered tools: unconstrained, the model may
            # call a tool never offered or write the call as text. Refused by name instead.
            _refuse_uncompilable_tool(req, vocabulary, "tool_choice " + ("required" if choice == "required"
                                                                          else "naming it"))
        log.warning("tool calls of this request are not constrained: %s", error)
        return None
    return grammar


def _single_call(req) -> bool:
    return getattr(req, "parallel_tool_calls", None) is False


def _refuse_uncompilable_tool(req, vocabulary, what_needs_it: str) -> None:
    """A 400 naming the first offered tool whose parameters llguidance cannot compile, if there is one."""
    for tool in _offered_tools(req):
        error = vocabulary.grammars.error(call_grammar([tool], vocabulary))
        if error is not None:
            name = tool["function"]["name"]
            index = next(j for j, offered in enumerate(req.tools) if offered.function.name == name)
            param = f"tools.{index}.function.parameters"
            raise InvalidRequestError(f"{param} cannot be enforced together with {what_needs_it}: {error}",
                                      param=param)


def thought_tokens(reasoning, encode) -> tuple[int, int] | None:
    """The thought's opener and closer as single token ids, or None when the checkpoint has no thought
    markers or they take more than one token each (a grammar names a thought by its marker tokens).
    Computed once at load (RuntimeInfo.thought_tokens): the markers are the checkpoint's, not the request's."""
    if reasoning is None or not reasoning.start or not reasoning.end:
        return None
    opener, closer = encode(reasoning.start), encode(reasoning.end)
    if len(opener) == 1 and len(closer) == 1:
        return opener[0], closer[0]
    return None


def _response_grammar(req, state, reasoning_open: bool) -> str | None:
    """The grammar of the turn for a JSON `response_format`, or None for text. The schema is the
    client's: one the engine cannot compile is a 400 naming it, not an unconstrained answer."""
    schema = _json_response_schema(req)
    if schema is None:
        return None
    fmt = req.response_format
    info = state.info
    grammars = info.grammars
    if grammars is None:
        raise NotSupportedError(f"response_format {fmt.type} needs a grammar over this checkpoint's tokenizer, "
                                "and llguidance cannot read it (see the server log)", param="response_format")
    if req.ignore_eos:
        raise InvalidRequestError(f"ignore_eos cannot be combined with response_format {fmt.type}: the turn ends "
                                  "where the JSON does", param="ignore_eos")
    thought = info.thought_tokens
    if reasoning_open and thought is None:
        # The turn starts inside a thought whose closer the grammar cannot name: the answer would land
        # in the reasoning. Refused by name rather than served wrong.
        raise NotSupportedError(f"response_format {fmt.type} after a thought the prompt opened needs the thought's "
                                "markers to be single tokens, and this checkpoint's are not", param="response_format")
    calls = _turn_calls(req, info, fmt.type)
    grammar = response_grammar(schema, thought, reasoning_open, calls)
    error = grammars.error(grammar)
    if error is not None and calls is not None:
        # Only now, off the usual path, is each tool compiled alone: the calls are part of the one turn
        # grammar, so they cannot be left unconstrained as they are without a response_format, and a
        # tool's schema is refused by name instead of blamed on the format.
        _refuse_uncompilable_tool(req, info.call_grammar, f"response_format {fmt.type}")
    param = "response_format.json_schema.schema" if fmt.type == "json_schema" else "response_format"
    if error is not None:
        raise InvalidRequestError(f"{param} cannot be enforced: {error}", param=param)
    why = grammars.start_error(value_grammar(schema))
    if why is not None:
        raise InvalidRequestError(f"{param} cannot be enforced: no JSON value of it can begin ({why}; is there "
                                  "a $ref that only refers to itself?)", param=param)
    never_ends = never_ending_part(schema)
    if never_ends is not None:  # the grammar would meet it mid-answer and stand down, leaving no JSON
        raise InvalidRequestError(f"{param} cannot be enforced: {never_ends}", param=param)
    return grammar


def _turn_calls(req, info, fmt_type: str) -> TurnCalls | None:
    """The calls a JSON-answer turn may make instead of its answer, when the request offers tools."""
    offered = _offered_tools(req)
    if not offered:
        return None
    vocabulary = info.call_grammar
    if vocabulary is None or vocabulary.opener is None:
        raise NotSupportedError(f"response_format {fmt_type} together with tools needs a tool-call grammar armed by "
                                f"a call opener token, and this checkpoint ({info.spec.model_type}) has none (Hermes, "
                                "Mistral or Llama 3 calls with single-token markers only) or the server runs with "
                                "--no-tool-call-grammar: send tools or a JSON response_format, or tool_choice "
                                '"none"', param="response_format")
    required = getattr(req, "tool_choice", None) not in (None, "auto")
    single = _single_call(req)
    return TurnCalls(call_blocks(offered, vocabulary, single), required, single)


def _logit_bias(req, state) -> dict[int, float]:
    """The client's `logit_bias`, and under `tool_choice: "none"` with tools the family's call opener banned
    (when it is one token: the anchor token, resolved at load whether anchors are on or off): OpenAI's
    "none" promises a turn without calls, and a model trained to call writes one unasked -- the template
    was not even shown the tools -- which would come back as raw markup in the content. The ban wins over a
    client's bias for that token."""
    bias = dict(req.logit_bias or {})
    opener = state.info.anchor_token
    if opener is not None and getattr(req, "tool_choice", None) == "none" and getattr(req, "tools", None):
        bias[opener] = float("-inf")
    return bias


def to_sampling_params(req, state, prompt_text: str, prompt_ids: list[int], *, logprobs: int | None,
                       reasoning_open: bool = False, field: str | None = None,
                       prompt_logprobs: int | None = None) -> SamplingParams:
    info = state.info
    n_ctx = info.max_model_len
    # The field the client wrote the prompt in: chat renders `messages`, completions take `prompt` (`prompt.2`
    # for the third of a batch).
    field = field or ("messages" if hasattr(req, "messages") else "prompt")
    check_context(len(prompt_ids), n_ctx, field)
    if not prompt_ids:
        # Nothing to decode from (a client's chat template that renders nothing, an empty prompt with no BOS).
        raise InvalidRequestError(f"{field} came to an empty prompt: there is no token to continue from", param=field)
    vocab = info.spec.vocab_size
    for i, tok in enumerate(prompt_ids):
        if tok >= vocab:
            raise InvalidRequestError(f"prompt token id {tok} is outside the vocabulary (size {vocab})",
                                      param=f"{field}.{i}")
    for tok in req.logit_bias or {}:
        if tok >= vocab:
            raise InvalidRequestError(f"logit_bias names token id {tok}, outside the vocabulary (size {vocab})",
                                      param=f"logit_bias.{tok}")
    for i, tok in enumerate(req.stop_token_ids or ()):
        if tok >= vocab:
            raise InvalidRequestError(f"stop_token_ids names token id {tok}, outside the vocabulary (size {vocab})",
                                      param=f"stop_token_ids.{i}")

    d = info.generation_defaults
    max_tokens = getattr(req, "effective_max_tokens", req.max_tokens)
    if max_tokens is None:  # the context's room
        max_tokens = n_ctx - len(prompt_ids)
    top_k = req.top_k if req.top_k is not None else d.get("top_k", 0)
    return SamplingParams(
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        temperature=req.temperature if req.temperature is not None else d.get("temperature", 1.0),
        top_p=req.top_p if req.top_p is not None else d.get("top_p", 1.0),
        top_k=max(0, top_k),
        min_p=req.min_p if req.min_p is not None else d.get("min_p", 0.0),
        repetition_penalty=req.repetition_penalty if req.repetition_penalty is not None else d.get("repetition_penalty", 1.0),
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        seed=req.seed,
        stop=tuple(req.stop or ()),
        stop_token_ids=tuple(req.stop_token_ids or ()),
        ignore_eos=req.ignore_eos,
        skip_special_tokens=req.skip_special_tokens,
        logit_bias=tuple(sorted(_logit_bias(req, state).items())),
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        n=req.n,
        reuse_cache=req.cache_prompt,
        reasoning_budget=_budget_plan(req, state, prompt_text, reasoning_open),
        forced_tool_call=_forced_tool_call(req, state, reasoning_open),
        tool_grammar=_tool_grammar(req, state),
        single_tool_call=_single_call(req),
        response_grammar=_response_grammar(req, state, reasoning_open),
    )
