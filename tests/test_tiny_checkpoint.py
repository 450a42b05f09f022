"""Behaviour of the tiny checkpoint builder (models/tiny_checkpoint.py).

Every other test that needs a model stands on these folders, so these tests
pin what they promise: they load offline through the Auto classes, their
markers are single tokens, greedy output is varied, templates render the
family's tool and thinking syntax, and builds are reproducible.
"""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from models.tiny_checkpoint import FAMILIES, GEMMA3_DEFAULT_WINDOW, build_tiny_checkpoint, main
from models.tiny_tokenizer import FLAVOURS

ALL = sorted(FAMILIES)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
# family -> (template kwargs, text that opens a tool call in its rendered prompt)
OPENERS = {
    "qwen3": ({}, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    "qwen2": ({}, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    "llama3": ({}, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>'),
    "mistral": ({}, '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_0"}]</s>'),
    "gemma3": ({}, '```tool_code\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'),
}


def _load(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return model, tokenizer


def _tool_conversation(arguments):
    call = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": '{"temp_c": 21}'},
    ]


@pytest.mark.parametrize("family", ALL)
def test_every_family_loads_offline_with_a_vocab_equal_to_the_tokenizer_length(tiny_checkpoint, family):
    model, tokenizer = _load(tiny_checkpoint(family))
    assert type(model).__name__ == FAMILIES[family].architecture
    assert model.config.architectures == [FAMILIES[family].architecture]
    assert model.config.vocab_size == len(tokenizer)
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.config.pad_token_id == tokenizer.pad_token_id
    stops = [tokenizer.convert_tokens_to_ids(t) for t in FLAVOURS[FAMILIES[family].flavour].stops]
    assert model.generation_config.eos_token_id == stops


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_every_marker_is_one_id_even_inside_running_text(tiny_checkpoint, flavour):
    if flavour == "harmony":
        folder = tiny_checkpoint("qwen3", template="harmony")
    else:
        folder = tiny_checkpoint(next(f for f, spec in FAMILIES.items() if spec.flavour == flavour))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    spec = FLAVOURS[flavour]
    for marker in list(spec.leading) + [content for content, _ in spec.trailing]:
        marker_id = tokenizer.convert_tokens_to_ids(marker)
        ids = tokenizer.encode(f"x1{marker}y2 z", add_special_tokens=False)
        assert ids.count(marker_id) == 1, marker
        assert tokenizer.decode(ids) == f"x1{marker}y2 z"


def test_the_loaded_tokenizer_encodes_exactly_like_the_tokenizer_json_it_was_saved_as(tiny_checkpoint):
    # transformers rebuilds some tokenizer classes (Qwen2Tokenizer) from the
    # vocabulary with its own pre-tokenizer; the saved pipeline must agree with it.
    texts = ["Hello  world 1234567 x", 'def f(a):\n    return {"k": a}  \n\n', "Ünïcode 日本語 😀 <think>ok</think>"]
    for folder in [tiny_checkpoint(family) for family in ALL] + [tiny_checkpoint("qwen3", template="harmony")]:
        loaded = AutoTokenizer.from_pretrained(folder)
        raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
        for text in texts:
            assert loaded.encode(text, add_special_tokens=False) == raw.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize(
    ("family", "kept", "skipped"),
    [
        ("qwen3", ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>"], ["<|im_end|>"]),
        ("llama3", [], ["<|python_tag|>", "<|eot_id|>", "<|eom_id|>"]),
        ("mistral", [], ["[TOOL_CALLS]", "[INST]", "</s>"]),
        ("gemma3", [], ["<start_of_turn>", "<end_of_turn>"]),
    ],
)
def test_skip_special_tokens_drops_exactly_what_the_real_checkpoint_marks_special(
    tiny_checkpoint, family, kept, skipped
):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint(family))
    text = "a" + "b".join(kept + skipped) + "c"
    decoded = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False), skip_special_tokens=True)
    assert all(marker in decoded for marker in kept)
    assert not any(marker in decoded for marker in skipped)


@pytest.mark.parametrize(("family", "dtype"), [(f, "float32") for f in ALL] + [("gemma3", "bfloat16")])
def test_greedy_output_is_varied_rather_than_one_repeated_token(tiny_checkpoint, family, dtype):
    model, tokenizer = _load(tiny_checkpoint(family, dtype=dtype))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the weather in Paris?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**prompt, max_new_tokens=20, min_new_tokens=20, do_sample=False)
    new = out[0, prompt["input_ids"].shape[1] :].tolist()
    assert len(new) == 20
    assert len(set(new)) >= 8, new


@pytest.mark.parametrize("family", ALL)
def test_bfloat16_weights_give_finite_logits_over_a_long_prompt(tiny_checkpoint, family):
    model, tokenizer = _load(tiny_checkpoint(family, dtype="bfloat16", sliding_window=16))
    assert model.dtype == torch.bfloat16
    ids = torch.randint(0, len(tokenizer), (1, 200), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert torch.isfinite(logits).all()


def test_qwen3_generation_prompt_opens_a_think_block_unless_thinking_is_disabled(tiny_checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3"))
    messages = [{"role": "user", "content": "hi"}]
    opened = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    closed = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert opened.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert closed.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3_replays_this_turns_reasoning_token_for_token_and_drops_older_reasoning(tiny_checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3"))
    history = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "done", "reasoning_content": "OLD THOUGHT"},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    prompt = tokenizer.apply_chat_template(history, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    generated = (
        'Need the tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call><|im_end|>"
    )
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    replay = history + [
        {"role": "assistant", "content": "", "reasoning_content": "Need the tool.", "tool_calls": [call]},
        {"role": "tool", "content": "sunny"},
    ]
    rendered = tokenizer.apply_chat_template(replay, tools=TOOLS, tokenize=False)
    assert "OLD THOUGHT" not in prompt and "OLD THOUGHT" not in rendered
    assert rendered.startswith(prompt + generated)
    first_ids = tokenizer.encode(prompt + generated, add_special_tokens=False)
    assert tokenizer.encode(rendered, add_special_tokens=False)[: len(first_ids)] == first_ids


@pytest.mark.parametrize("family", ALL)
def test_tools_and_tool_calls_render_alike_for_dict_or_json_string_arguments(tiny_checkpoint, family):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint(family))
    as_dict = tokenizer.apply_chat_template(
        _tool_conversation({"city": "Paris"}), tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    as_string = tokenizer.apply_chat_template(
        _tool_conversation('{"city": "Paris"}'), tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert as_dict == as_string
    assert OPENERS[family][1] in as_dict
    assert as_dict.index("Weather for a city.") < as_dict.index(OPENERS[family][1])
    assert '{"temp_c": 21}' in as_dict
    ids = tokenizer.apply_chat_template(_tool_conversation({"city": "Paris"}), tools=TOOLS, return_dict=True)
    assert tokenizer.decode(ids["input_ids"]) == tokenizer.apply_chat_template(
        _tool_conversation({"city": "Paris"}), tools=TOOLS, tokenize=False
    )


def test_harmony_template_uses_single_token_channel_markers_and_ends_with_an_assistant_start(tiny_checkpoint):
    folder = tiny_checkpoint("qwen3", template="harmony")
    model, tokenizer = _load(folder)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    prompt = tokenizer.apply_chat_template(
        _tool_conversation({"city": "Paris"}), tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|start|>assistant")
    assert "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>" in prompt
    assert "<|start|>functions.get_weather to=assistant<|channel|>" in prompt
    assert "<think>" not in tokenizer.get_vocab()
    for marker in ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>"):
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1


@pytest.mark.parametrize(
    ("family", "window", "layer_types"),
    [
        ("qwen3", 8, ["full_attention", "sliding_attention"]),
        ("qwen2", 8, ["full_attention", "sliding_attention"]),
        ("qwen3", None, ["full_attention", "full_attention"]),
        ("gemma3", None, ["sliding_attention"] * 5 + ["full_attention"]),
    ],
)
def test_windowed_layers_follow_each_family_rule(tiny_checkpoint, family, window, layer_types):
    config = AutoConfig.from_pretrained(tiny_checkpoint(family, sliding_window=window))
    assert config.layer_types == layer_types
    expected_window = GEMMA3_DEFAULT_WINDOW if family == "gemma3" else window
    assert config.sliding_window == expected_window


def test_mistral_windows_every_layer_only_when_asked(tiny_checkpoint):
    assert AutoConfig.from_pretrained(tiny_checkpoint("mistral", sliding_window=8)).sliding_window == 8
    assert AutoConfig.from_pretrained(tiny_checkpoint("mistral")).sliding_window is None


def test_family_specific_config_paths_are_exercised(tiny_checkpoint):
    llama = AutoConfig.from_pretrained(tiny_checkpoint("llama3"))
    assert llama.rope_parameters["rope_type"] == "llama3"
    assert llama.rope_parameters["original_max_position_embeddings"] < llama.max_position_embeddings
    gemma = AutoConfig.from_pretrained(tiny_checkpoint("gemma3"))
    assert gemma.query_pre_attn_scalar != gemma.head_dim
    assert gemma.tie_word_embeddings
    full, sliding = gemma.rope_parameters["full_attention"], gemma.rope_parameters["sliding_attention"]
    assert full["rope_theta"] != sliding["rope_theta"]
    qwen2, _ = _load(tiny_checkpoint("qwen2"))
    assert qwen2.model.layers[0].self_attn.q_proj.bias.abs().sum() > 0
    qwen3 = AutoConfig.from_pretrained(tiny_checkpoint("qwen3"))
    assert qwen3.head_dim * qwen3.num_attention_heads != qwen3.hidden_size


def test_a_small_max_shard_size_writes_an_index_and_still_loads(tiny_checkpoint):
    folder = tiny_checkpoint("qwen3", max_shard_size="50KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and all((folder / shard).is_file() for shard in shards)
    model, _ = _load(folder)
    assert model.config.num_hidden_layers == 2


def test_a_build_is_byte_for_byte_reproducible_for_a_seed_and_differs_across_seeds(tmp_path):
    first = build_tiny_checkpoint("qwen2", tmp_path / "a", seed=3)
    second = build_tiny_checkpoint("qwen2", tmp_path / "b", seed=3)
    other = build_tiny_checkpoint("qwen2", tmp_path / "c", seed=4)
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert all((first / n).read_bytes() == (second / n).read_bytes() for n in names)
    assert (first / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()


def test_the_cli_builds_a_loadable_folder_and_rejects_an_impossible_combination(tmp_path, capsys):
    assert main(["--family", "mistral", "--out", str(tmp_path / "m"), "--layers", "1", "--sliding-window", "4"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    assert AutoConfig.from_pretrained(tmp_path / "m").num_hidden_layers == 1
    with pytest.raises(SystemExit) as exit_info:
        main(["--family", "llama3", "--out", str(tmp_path / "h"), "--template", "harmony"])
    assert exit_info.value.code == 2
