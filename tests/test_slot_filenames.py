"""Slot file names: llama.cpp's fs_validate_filename rules, each refusal named."""

from __future__ import annotations

import os

import pytest

from slots.filenames import InvalidSlotFilename, resolve_slot_path, validate_slot_filename


@pytest.mark.parametrize(
    "name",
    ["slot0.bin", ".hidden", "résumé.fslot", "日本語.fslot", "a.b.c", "x" * 255, "é" * 127,
     "tab-free name", "a\u2028b", "emoji\U0001F600"],
)
def test_ordinary_names_are_accepted_unchanged(name):
    assert validate_slot_filename(name) == name


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("", "empty"),
        ("x" * 256, "longer than 255"),
        ("é" * 128, "longer than 255"),  # 256 bytes in UTF-8, 128 characters
        ("bad\ud800name", "UTF-8"),
        ("nul\x00", "control character U+0000"),
        ("line\nfeed", "control character U+000A"),
        ("del\x7f", "control character U+007F"),
        ("c1\x85", "control character U+0085"),
        ("a/b", "reserved character '/'"),
        ("a\\b", "reserved character"),
        ("c:d", "reserved character ':'"),
        ("star*", "reserved character '*'"),
        ("what?", "reserved character '?'"),
        ('quo"te', "reserved character"),
        ("<tag>", "reserved character '<'"),
        ("pi|pe", "reserved character '|'"),
        ("dot\uff0edot", "FULLWIDTH FULL STOP"),
        ("div\u2215slash", "DIVISION SLASH"),
        ("set\u2216minus", "SET MINUS"),
        ("repl\ufffd", "REPLACEMENT CHARACTER"),
        ("\ufeffbom", "BYTE ORDER MARK"),
        (" lead", "leading or trailing space"),
        ("trail ", "leading or trailing space"),
        ("trail.", "trailing '.'"),
        (".", "trailing '.'"),
        ("..", "trailing '.'"),
        ("a..b", "'..'"),
        ("..hidden", "'..'"),
    ],
)
def test_each_broken_rule_is_refused_and_named(name, rule):
    with pytest.raises(InvalidSlotFilename) as caught:
        validate_slot_filename(name)
    assert rule in str(caught.value)


def test_a_name_given_as_invalid_utf8_bytes_is_refused():
    with pytest.raises(InvalidSlotFilename, match="not valid UTF-8"):
        validate_slot_filename(b"over\xc0\xaflong")


def test_a_name_given_as_valid_utf8_bytes_is_decoded():
    assert validate_slot_filename("café".encode()) == "café"


def test_a_valid_name_resolves_inside_the_save_directory(tmp_path):
    assert resolve_slot_path(tmp_path, "slot.fslot") == tmp_path / "slot.fslot"


def test_a_traversal_attempt_never_reaches_the_filesystem(tmp_path):
    with pytest.raises(InvalidSlotFilename):
        resolve_slot_path(tmp_path / "slots", "../secret")


def test_a_symlink_planted_in_the_save_directory_cannot_point_outside_it(tmp_path):
    save_dir, outside = tmp_path / "slots", tmp_path / "elsewhere"
    save_dir.mkdir()
    outside.mkdir()
    os.symlink(outside / "target.fslot", save_dir / "escape.fslot")
    with pytest.raises(InvalidSlotFilename, match="outside the slot directory"):
        resolve_slot_path(save_dir, "escape.fslot")
