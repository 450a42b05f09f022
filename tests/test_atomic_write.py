"""Atomic writes: the final name holds the old file or the whole new one."""

from __future__ import annotations

import stat

import pytest

from slots.atomic_write import atomic_write


def test_a_write_publishes_the_whole_file_and_reports_its_size(tmp_path):
    target = tmp_path / "slot.fslot"
    written = atomic_write(target, lambda f: (f.write(b"abc"), f.write(b"defg")))
    assert written == 7
    assert target.read_bytes() == b"abcdefg"
    assert [p.name for p in tmp_path.iterdir()] == ["slot.fslot"]


def test_a_write_replaces_an_existing_file(tmp_path):
    target = tmp_path / "slot.fslot"
    target.write_bytes(b"old contents")
    atomic_write(target, lambda f: f.write(b"new"))
    assert target.read_bytes() == b"new"


def test_a_failing_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "slot.fslot"
    target.write_bytes(b"old contents")

    def half_then_fail(f):
        f.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_bytes() == b"old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["slot.fslot"]


def test_an_interrupted_first_write_leaves_no_file_under_the_final_name(tmp_path):
    target = tmp_path / "slot.fslot"

    def interrupted(f):
        f.write(b"x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, interrupted)
    assert list(tmp_path.iterdir()) == []


def test_a_255_byte_name_still_gets_a_temporary_file(tmp_path):
    target = tmp_path / ("é" * 127 + "x")  # 255 bytes of UTF-8
    assert atomic_write(target, lambda f: f.write(b"ok")) == 2
    assert target.read_bytes() == b"ok"


def test_a_published_file_is_private_to_its_owner(tmp_path):
    target = tmp_path / "slot.fslot"
    atomic_write(target, lambda f: f.write(b"kv"))
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
