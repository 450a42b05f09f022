"""The committed demo checkpoint: loads offline, has the promised shape, and agent loops re-render exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from models.demo import corpus
from models.demo.parse import parse_turn
from models.demo.render import chat_template, render
from models.demo.tokenizer_build import MARKER_TOKENS, SPECIAL_TOKENS
from models.demo.tools import TOOLS, execute

CHECKPOINT = Path(__file__).resolve().parents[1] / "models" / "demo" / "checkpoint"


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(CHECKPOINT, local_files_only=True)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(CHECKPOINT, local_files_only=True).eval()


def test_the_checkpoint_is_a_small_bf16_qwen3(model):
    weights = CHECKPOINT / "model.safetensors"
    assert weights.stat().st_size <= 20 * 1024 * 1024
    assert model.config.model_type == "qwen3"
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.config.tie_word_embeddings


def test_the_middle_layers_attend_through_a_96_token_window_and_the_first_and_last_see_everything():
    config = AutoConfig.from_pretrained(CHECKPOINT, local_files_only=True)
    assert config.sliding_window == 96 and config.use_sliding_window
    assert config.layer_types == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]


def test_special_and_marker_tokens_are_single_ids_and_markers_survive_decoding(tokenizer, model):
    for token in SPECIAL_TOKENS + MARKER_TOKENS:
        ids = tokenizer.encode(f"a{token}b", add_special_tokens=False)
        assert tokenizer.convert_tokens_to_ids(token) in ids
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1
    for token in SPECIAL_TOKENS:  # control tokens are special: skip_special_tokens drops them
        assert tokenizer.decode(tokenizer.encode(f"a{token}b", add_special_tokens=False), skip_special_tokens=True) == "ab"
    text = "<think>\nx\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>"
    assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=True) == text.replace("<|im_end|>", "")
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in model.generation_config.eos_token_id
    assert len(tokenizer) == model.config.vocab_size


def test_the_checkpoint_carries_the_template_it_was_trained_with(tokenizer):
    assert (CHECKPOINT / "chat_template.jinja").read_text() == chat_template()
    messages = [{"role": "user", "content": "What time is it in Lima?"}]
    ids = tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=True)["input_ids"]
    assert tokenizer.decode(ids) == render(messages, TOOLS, add_generation_prompt=True)


def test_the_tokenizer_reproduces_rendered_training_text_exactly(tokenizer):
    for conv in corpus.training_conversations(seed=1, count=40):
        text = render(conv.messages, conv.tools, enable_thinking=conv.enable_thinking)
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def _greedy(model, tokenizer, prompt_ids: list[int], max_new: int = 400) -> list[int]:
    out = model.generate(input_ids=torch.tensor([prompt_ids]), max_new_tokens=max_new, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id)
    return out[0, len(prompt_ids):].tolist()


@pytest.mark.parametrize("request_text", ["What's the weather in Oslo?", "What is 37 times 12.5?"])
def test_an_agent_loop_that_passes_reasoning_back_re_renders_the_generated_tokens(model, tokenizer, request_text):
    # Training phrasings: this is about the template round trip, not about held-out accuracy (that is
    # the evaluation's business: evaluate_http.py, model card).
    messages = [{"role": "user", "content": request_text}]
    prompt = tokenizer(render(messages, TOOLS, add_generation_prompt=True), add_special_tokens=False)["input_ids"]
    generated = _greedy(model, tokenizer, prompt)
    assert generated[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    turn = parse_turn(tokenizer.decode(generated))
    assert turn.tool_calls and turn.tool_calls[0].name in {t["function"]["name"] for t in TOOLS}
    messages.append(turn.message())
    messages += [{"role": "tool", "content": execute(call.name, call.arguments)} for call in turn.tool_calls]
    rerendered = tokenizer(render(messages, TOOLS, add_generation_prompt=True), add_special_tokens=False)["input_ids"]
    assert rerendered[: len(prompt) + len(generated)] == prompt + generated


def test_plain_chat_gets_an_answer_without_a_tool_call(model, tokenizer):
    messages = [{"role": "user", "content": "Hello!"}]
    prompt = tokenizer(render(messages, TOOLS, add_generation_prompt=True), add_special_tokens=False)["input_ids"]
    turn = parse_turn(tokenizer.decode(_greedy(model, tokenizer, prompt, 200)))
    assert not turn.tool_calls and turn.content


def test_the_model_card_reports_the_measured_http_evaluation():
    card = (CHECKPOINT / "README.md").read_text()
    evaluation = json.loads((CHECKPOINT / "evaluation_http.json").read_text())
    assert "toy" in card and "Not a general assistant" in card
    for name in ("tool_call", "final_answer", "chat_no_tool", "budget_0_exact", "budget_8_exact"):
        rate = evaluation["metrics"][name]["rate"]
        assert f"| {name} | {100 * rate:.1f}% |" in card
    if evaluation["metrics"]["tool_call"]["rate"] < 0.9:
        assert "below its target" in card
