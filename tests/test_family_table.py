"""The model-family table (configs/model_families.toml via models/family_table.py)."""

from __future__ import annotations

import dataclasses

import pytest

from models.family_table import (
    FamilyInfo,
    FamilyTableError,
    ReasoningFormat,
    anchor_description,
    detect_reasoning_format,
    load_family_table,
    parse_family_table,
)
from scheduler.window import resolve_anchor_token

OPENERS = {
    "qwen2": "<tool_call>",
    "qwen3": "<tool_call>",
    "qwen3_moe": "<tool_call>",
    "glm4_moe": "<tool_call>",
    "llama": "<|python_tag|>",
    "mistral": "[TOOL_CALLS]",
    "gemma4": "<|tool_call>",
    "minimax": "<minimax:tool_call>",
    "deepseek_v32": "<｜DSML｜function_calls>",
}


@pytest.fixture(scope="module")
def table():
    return load_family_table()


@pytest.mark.parametrize(("model_type", "opener"), sorted(OPENERS.items()))
def test_each_family_has_its_tool_call_opener(table, model_type, opener):
    assert table.family(model_type).tool_call_opener == opener


def test_gpt_oss_has_no_opener_because_a_channel_header_opens_every_message(table):
    gpt_oss = table.family("gpt_oss")
    assert gpt_oss.tool_call_opener is None
    assert gpt_oss.tool_call_format == "harmony"
    assert gpt_oss.reasoning.kind == "channel"
    assert gpt_oss.reasoning.start is None and gpt_oss.reasoning.end is None


def test_tool_call_formats_name_the_parser(table):
    formats = {m: table.family(m).tool_call_format for m in ("qwen3", "llama", "mistral", "gemma4")}
    assert formats == {
        "qwen3": "hermes",
        "llama": "llama3_json",
        "mistral": "mistral",
        "gemma4": "gemma4",
    }


def test_every_family_with_an_opener_can_resolve_an_anchor(table):
    for info in table.families.values():
        expected = 7 if info.tool_call_opener else None
        assert resolve_anchor_token(info.tool_call_opener, lambda _: [7]) == expected, info


def test_reasoning_formats_carry_their_marker_pairs(table):
    assert table.family("qwen3").reasoning == ReasoningFormat("think", "<think>", "</think>", "markers")
    assert table.family("deepseek_v32").reasoning.name == "think"
    gemma4 = table.family("gemma4").reasoning
    assert (gemma4.start, gemma4.end, gemma4.kind) == ("<|channel>thought", "<channel|>", "markers")
    assert table.family("llama").reasoning is None
    assert table.family("qwen2").reasoning is None


def test_family_info_is_frozen(table):
    with pytest.raises(dataclasses.FrozenInstanceError):
        table.family("qwen3").tool_call_opener = "x"  # type: ignore[misc]


def test_an_unknown_model_type_is_not_in_the_table(table):
    assert table.family("no_such_family") is None


def test_the_chat_template_decides_the_reasoning_format(table):
    harmony = detect_reasoning_format("qwen3", "{{ '<|start|>assistant<|channel|>analysis' }}", table)
    assert harmony.name == "harmony"
    think = detect_reasoning_format("llama", "{{ '<|im_start|>assistant\\n<think>\\n' }}", table)
    assert think.name == "think"
    gemma4 = detect_reasoning_format("gemma3", "{{ '<|channel>thought\\n' }}", table)
    assert gemma4.name == "gemma4"


def test_a_template_without_reasoning_markers_has_no_reasoning_format_whatever_the_family(table):
    assert detect_reasoning_format("qwen3", "{{ messages[0]['content'] }}", table) is None


def test_without_a_template_the_family_table_decides(table):
    assert detect_reasoning_format("qwen3", None, table).name == "think"
    assert detect_reasoning_format("gpt_oss", None, table).name == "harmony"
    assert detect_reasoning_format("llama", None, table) is None
    assert detect_reasoning_format("no_such_family", None, table) is None


def test_detection_uses_the_shipped_table_by_default():
    assert detect_reasoning_format("qwen3", None).name == "think"


def test_the_startup_line_names_the_anchor_token(table):
    line = anchor_description("qwen3", table.family("qwen3"), 151657)
    assert "151657" in line and "<tool_call>" in line and "on" in line


def test_the_startup_line_says_why_there_is_no_anchor(table):
    no_opener = anchor_description("gpt_oss", table.family("gpt_oss"), None)
    assert "no tool-call opener" in no_opener
    multi = anchor_description("deepseek_v32", table.family("deepseek_v32"), None)
    assert "not a single token" in multi and "DSML" in multi
    unknown = anchor_description("mystery", None, None)
    assert "mystery" in unknown and "not in the family table" in unknown


def test_a_family_naming_an_unknown_reasoning_format_is_refused_by_name():
    text = '[families.foo]\nreasoning = "thonk"\n'
    with pytest.raises(FamilyTableError, match=r"families\.foo.*thonk"):
        parse_family_table(text)


def test_a_misspelled_key_is_refused_rather_than_ignored():
    with pytest.raises(FamilyTableError, match="tool_call_openr"):
        parse_family_table('[families.foo]\ntool_call_openr = "<x>"\n')


def test_a_markers_format_needs_both_markers_and_a_channel_format_none():
    with pytest.raises(FamilyTableError, match="both start and end"):
        parse_family_table('[reasoning_formats.x]\nkind = "markers"\nstart = "<a>"\n')
    with pytest.raises(FamilyTableError, match="no start/end"):
        parse_family_table('[reasoning_formats.x]\nkind = "channel"\nstart = "<a>"\n')
    with pytest.raises(FamilyTableError, match="kind"):
        parse_family_table('[reasoning_formats.x]\nkind = "grammar"\n')


def test_malformed_toml_names_its_source():
    with pytest.raises(FamilyTableError, match="custom.toml"):
        parse_family_table("[families\n", "custom.toml")


def test_a_table_can_be_loaded_from_another_path(tmp_path):
    path = tmp_path / "families.toml"
    path.write_text(
        '[reasoning_formats.r]\nkind = "markers"\nstart = "<r>"\nend = "</r>"\ntemplate = "<r>"\n'
        '[families.toy]\ntool_call_opener = "<call>"\ntool_call_format = "hermes"\nreasoning = "r"\n',
        encoding="utf-8",
    )
    custom = load_family_table(path)
    assert custom.family("toy") == FamilyInfo(
        "toy", "<call>", "hermes", ReasoningFormat("r", "<r>", "</r>", "markers")
    )
    assert detect_reasoning_format("toy", "... <r> ...", custom).name == "r"
