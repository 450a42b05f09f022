"""Slot identity: which field differs, and what makes two checkpoints different."""

from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from slots.identity import IdentityMismatch, KvDtype, SlotIdentity, checkpoint_fingerprint


def make_checkpoint(root: Path, seed: int = 0, vocab: tuple[str, ...] = ("a", "b")) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 2}))
    (root / "tokenizer.json").write_text(json.dumps({"model": {"vocab": list(vocab)}}))
    (root / "tokenizer_config.json").write_text("{}")
    rng = np.random.default_rng(seed)
    save_file({"embed": rng.standard_normal((16, 8)).astype(np.float32),
               "lm_head": rng.standard_normal((16, 8)).astype(np.float32)},
              str(root / "model.safetensors"))
    return root


def make_sparse_safetensors(path: Path, size: int, marker_at: int | None = None) -> None:
    """A `size`-byte safetensors file that is mostly a hole on disk."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [size - 8 - 64],
                               "data_offsets": [0, size - 8 - 64]}}).encode().ljust(64)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(size)
        if marker_at is not None:
            f.seek(marker_at)
            f.write(b"\x01" * 4096)


def identity(**changes) -> SlotIdentity:
    fields = dict(model_name="m", n_layers=2, n_kv_heads=2, head_dim=4,
                  kv_dtype=KvDtype.BF16, fingerprint="f" * 64)
    fields.update(changes)
    return SlotIdentity(**fields)


def test_identical_identities_compare_silently():
    identity().compare(identity())


@pytest.mark.parametrize(
    ("change", "field"),
    [({"n_layers": 3}, "n_layers"), ({"n_kv_heads": 8}, "n_kv_heads"),
     ({"head_dim": 64}, "head_dim"), ({"kv_dtype": "f32"}, "kv_dtype"),
     ({"fingerprint": "0" * 64}, "checkpoint"), ({"model_name": "other"}, "model_name")],
)
def test_a_differing_field_is_named_in_the_mismatch(change, field):
    with pytest.raises(IdentityMismatch) as caught:
        identity(**change).compare(identity())
    assert caught.value.field == field
    assert field in str(caught.value)


def test_a_fingerprint_mismatch_says_the_checkpoint_differs():
    with pytest.raises(IdentityMismatch, match="checkpoint fingerprint") as caught:
        identity(fingerprint="a" * 64).compare(identity())
    assert (caught.value.ours, caught.value.theirs) == ("a" * 64, "f" * 64)


def test_an_unknown_kv_dtype_is_refused_when_the_identity_is_made():
    with pytest.raises(ValueError):
        identity(kv_dtype="f8")


def test_same_shape_different_weights_fingerprint_differently(tmp_path):
    one = checkpoint_fingerprint(make_checkpoint(tmp_path / "one", seed=1))
    two = checkpoint_fingerprint(make_checkpoint(tmp_path / "two", seed=2))
    assert one != two


def test_same_shape_different_weights_differ_when_only_sampled(tmp_path):
    # 4 MiB of weights: above the whole-file threshold, so only sampled.
    prints = []
    for seed in (1, 2):
        root = make_checkpoint(tmp_path / str(seed), seed=seed)
        rng = np.random.default_rng(seed)
        save_file({"w": rng.standard_normal((1024, 1024)).astype(np.float32)},
                  str(root / "model.safetensors"))
        prints.append(checkpoint_fingerprint(root))
    assert prints[0] != prints[1]


def test_a_different_tokenizer_fingerprints_differently(tmp_path):
    one = checkpoint_fingerprint(make_checkpoint(tmp_path / "one", vocab=("a", "b")))
    two = checkpoint_fingerprint(make_checkpoint(tmp_path / "two", vocab=("b", "a")))
    assert one != two


def test_adding_a_chat_template_changes_the_fingerprint(tmp_path):
    root = make_checkpoint(tmp_path / "one")
    before = checkpoint_fingerprint(root)
    (root / "chat_template.jinja").write_text("{{ messages }}")
    assert checkpoint_fingerprint(root) != before


def test_the_same_folder_fingerprints_the_same_wherever_it_lives(tmp_path):
    root = make_checkpoint(tmp_path / "one", seed=7)
    first = checkpoint_fingerprint(root)
    assert checkpoint_fingerprint(root) == first
    assert checkpoint_fingerprint(shutil.copytree(root, tmp_path / "copy")) == first
    assert len(first) == 64 and int(first, 16) >= 0


def test_a_folder_without_safetensors_cannot_be_fingerprinted(tmp_path):
    root = make_checkpoint(tmp_path / "one")
    (root / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="safetensors"):
        checkpoint_fingerprint(root)


def test_a_weight_file_with_a_hostile_header_length_is_refused(tmp_path):
    root = make_checkpoint(tmp_path / "one")
    (root / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 60) + b"{}")
    with pytest.raises(ValueError, match="not a safetensors file"):
        checkpoint_fingerprint(root)


def test_a_large_checkpoint_is_sampled_fast_and_the_sample_sees_its_weights(tmp_path):
    size = 1 << 30
    plain, marked = make_checkpoint(tmp_path / "plain"), make_checkpoint(tmp_path / "marked")
    # The last sample ends at EOF, so a change in the last tensor's tail is seen.
    for root, marker in ((plain, None), (marked, size - 4096)):
        (root / "model.safetensors").unlink()
        make_sparse_safetensors(root / "model.safetensors", size, marker)
    started = time.perf_counter()
    fingerprint = checkpoint_fingerprint(plain)
    elapsed = time.perf_counter() - started
    # Measured well under 0.1 s; the bound only catches reading the whole GiB.
    assert elapsed < 5.0, elapsed
    assert fingerprint != checkpoint_fingerprint(marked)


def test_a_kv_dtype_mismatch_names_both_dtypes_as_the_flag_spells_them():
    with pytest.raises(IdentityMismatch) as caught:
        identity(kv_dtype="f32").compare(identity())
    assert "kv_dtype='f32', but the serving model has kv_dtype='bf16'" in str(caught.value)
