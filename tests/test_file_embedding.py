"""The embedding lookup read from the checkpoint file, so a tied head can be reordered (prepacked_linear)."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from models import prepacked_linear
from models.file_embedding import FileEmbedding, find_stored_tensor
from models.loader import load_model, weight_files
from models.model_runner import ModelRunner
from models.prepacked_linear import PrepackedLinear, prepack_tied_head
from runner_decode import greedy_decode
from server.runtime import build_runtime
from server.settings import ServeSettings

native_bf16 = pytest.mark.skipif(not prepacked_linear.applies("bfloat16"),
                                 reason="this CPU does not multiply bf16 natively (the model computes in float32)")
KEY = "model.embed_tokens.weight"


def _table_file(tmp_path, dtype, rows=50, dim=12):
    table = torch.randn(rows, dim, generator=torch.Generator().manual_seed(3)).to(dtype)
    path = tmp_path / "model.safetensors"
    save_file({"model.norm.weight": torch.ones(dim), KEY: table}, str(path))
    return path, table


@pytest.mark.parametrize("stored, compute", [(torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16),
                                             (torch.float16, torch.float32), (torch.float32, torch.float32)])
def test_rows_read_from_the_file_equal_the_rows_of_the_loaded_table(tmp_path, stored, compute):
    path, table = _table_file(tmp_path, stored)
    embed = FileEmbedding(find_stored_tensor([path], KEY), compute)
    ids = torch.tensor([[7, 0, 49, 7], [3, 3, 12, 48]])  # repeats, both ends, out of order
    got = embed(ids)
    assert got.shape == (2, 4, 12) and got.dtype == compute
    assert torch.equal(got, nn.functional.embedding(ids, table.to(compute)))
    assert embed(torch.tensor([], dtype=torch.long)).shape == (0, 12)


def test_a_tensor_is_found_in_whichever_shard_holds_it_and_a_missing_one_is_none(tmp_path):
    other = tmp_path / "a.safetensors"
    save_file({"x": torch.zeros(2, 2)}, str(other))
    path, _ = _table_file(tmp_path, torch.bfloat16)
    found = find_stored_tensor([other, path], KEY)
    assert found.path == path and found.dtype == "BF16" and found.shape == (50, 12)
    assert find_stored_tensor([other], KEY) is None


def test_a_token_id_outside_the_table_is_refused_by_name(tmp_path):
    path, _ = _table_file(tmp_path, torch.float32)
    embed = FileEmbedding(find_stored_tensor([path], KEY), torch.float32)
    with pytest.raises(IndexError, match="token id 50 is outside the embedding's 50 rows"):
        embed(torch.tensor([1, 50]))


def test_a_checkpoint_truncated_under_the_server_fails_the_lookup_by_name_instead_of_reading_garbage(tmp_path):
    path, _ = _table_file(tmp_path, torch.float32)
    embed = FileEmbedding(find_stored_tensor([path], KEY), torch.float32)
    os.truncate(path, os.path.getsize(path) - 12 * 4 * 10)  # the last ten rows are gone
    embed(torch.tensor([0, 39]))
    with pytest.raises(RuntimeError, match="model.safetensors is shorter than when it was loaded"):
        embed(torch.tensor([45]))


def test_a_checkpoint_replaced_by_rename_leaves_the_server_reading_the_file_it_loaded(tmp_path):
    path, table = _table_file(tmp_path, torch.float32)
    embed = FileEmbedding(find_stored_tensor([path], KEY), torch.float32)
    staged = tmp_path / "new"
    staged.mkdir()
    save_file({KEY: torch.zeros(50, 12)}, str(staged / "model.safetensors"))
    os.replace(staged / "model.safetensors", path)
    assert torch.equal(embed(torch.tensor([5])), table[5:6])


@native_bf16
def test_a_tied_head_is_reordered_and_decodes_the_same_tokens_with_the_same_logits(tiny_checkpoint):
    path = tiny_checkpoint("qwen2", layers=2)
    plain = load_model(path, "bfloat16")
    model = load_model(path, "bfloat16")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    prepacked_linear.prepack_linears(model)
    assert prepack_tied_head(model, find_stored_tensor(weight_files(path), KEY))
    assert isinstance(model.lm_head, PrepackedLinear) and isinstance(model.model.embed_tokens, FileEmbedding)
    assert not any(p.shape == plain.model.embed_tokens.weight.shape for p in model.parameters())  # not held twice
    prompt = [(7 * j) % 500 + 20 for j in range(40)]
    a, seq_a = greedy_decode(ModelRunner(plain, 16, {"full": 8, "window": 8}), prompt, 12)
    b, seq_b = greedy_decode(ModelRunner(model, 16, {"full": 8, "window": 8}), prompt, 12)
    assert seq_a == seq_b
    assert (a - b).abs().max().item() <= 0.02 * a.abs().max().item()


@native_bf16
def test_an_untied_head_or_a_missing_table_is_left_to_prepack_linears(tiny_checkpoint):
    untied = tiny_checkpoint("qwen3", layers=2)
    model = load_model(untied, "bfloat16")
    assert not prepack_tied_head(model, find_stored_tensor(weight_files(untied), KEY))
    tied = load_model(tiny_checkpoint("qwen2", layers=2), "bfloat16")
    assert not prepack_tied_head(tied, None)
    assert isinstance(tied.lm_head, nn.Linear) and tied.lm_head.weight is tied.model.embed_tokens.weight


@native_bf16
def test_the_server_reorders_a_tied_head_unless_told_not_to_prepack(tiny_checkpoint, tmp_path):
    path = tmp_path / "tied"
    shutil.copytree(tiny_checkpoint("qwen2", layers=2), path)
    _, _, _, runner, _ = build_runtime(ServeSettings(model=path, dtype="bfloat16"))
    assert isinstance(runner.model.lm_head, PrepackedLinear)
    assert isinstance(runner.model.model.embed_tokens, FileEmbedding)
    _, _, _, runner, _ = build_runtime(ServeSettings(model=path, dtype="bfloat16", prepacked_weights=False))
    assert runner.model.lm_head.weight is runner.model.model.embed_tokens.weight
