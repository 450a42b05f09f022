"""Loading is strict and refuses a bad folder with a message naming the problem."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from models.config import CheckpointError, load_spec
from models.loader import load_model


@pytest.fixture
def qwen3_copy(tiny_checkpoint, tmp_path):
    src = tiny_checkpoint("qwen3")
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def _rewrite_weights(folder, edit):
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def test_a_missing_tensor_is_refused_by_name(qwen3_copy):
    _rewrite_weights(qwen3_copy, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        load_model(qwen3_copy, "float32")


def test_an_extra_tensor_is_refused_by_name(qwen3_copy):
    _rewrite_weights(qwen3_copy, lambda t: t.__setitem__("model.layers.0.self_attn.extra.weight", torch.zeros(2)))
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'model\.layers\.0\.self_attn\.extra\.weight'"):
        load_model(qwen3_copy, "float32")


def test_a_shape_mismatch_is_refused_with_both_shapes(qwen3_copy):
    def shrink(t):
        t["model.norm.weight"] = t["model.norm.weight"][:-1].clone()

    _rewrite_weights(qwen3_copy, shrink)
    with pytest.raises(CheckpointError, match=r"'model\.norm\.weight' has shape \(63,\), expected \(64,\)"):
        load_model(qwen3_copy, "float32")


def test_an_unsupported_architecture_is_refused_listing_the_supported_ones(qwen3_copy):
    cfg = json.loads((qwen3_copy / "config.json").read_text())
    cfg["architectures"] = ["FalconForCausalLM"]
    (qwen3_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as err:
        load_spec(qwen3_copy)
    assert "FalconForCausalLM" in str(err.value)
    for supported in ("Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "Gemma3ForCausalLM"):
        assert supported in str(err.value)


def test_a_folder_without_config_json_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        load_spec(tmp_path)


def test_a_sharded_checkpoint_loads_the_same_weights_as_a_single_file(tiny_checkpoint):
    single = load_model(tiny_checkpoint("qwen2"), "float32")
    sharded_dir = tiny_checkpoint("qwen2", max_shard_size="40KB")
    assert (sharded_dir / "model.safetensors.index.json").is_file()
    sharded = load_model(sharded_dir, "float32")
    a, b = single.state_dict(), sharded.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_tied_embeddings_share_one_tensor(tiny_checkpoint):
    model = load_model(tiny_checkpoint("gemma3"), "float32")
    assert model.spec.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_dtype_choice_is_applied_and_an_unknown_one_refused(tiny_checkpoint):
    path = tiny_checkpoint("llama3")
    assert load_model(path, "bfloat16").model.embed_tokens.weight.dtype == torch.bfloat16
    with pytest.raises(CheckpointError, match="dtype 'int8'"):
        load_model(path, "int8")
