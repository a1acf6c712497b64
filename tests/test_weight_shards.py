"""vitzoo.weight_shards: `max_shard_size` as transformers spells it, the split as huggingface_hub
makes it, and a save that shards (or stops sharding) leaves no stale weights for a reader."""

from __future__ import annotations

import json

import pytest
import torch

import vitzoo
from vitzoo.weight_shards import parse_shard_size, plan_shards, write_weights
from vitzoo.weights.files import read_checkpoint, reading_only


def _tiny(seed: int = 0, **kw):
    torch.manual_seed(seed)
    return vitzoo.create("vit_ti16", depth=2, embed_dim=24, num_heads=2, img_size=32, num_classes=3, **kw).eval()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(123, 123), ("5GB", 5 * 10**9), ("500MB", 500 * 10**6), ("2GiB", 2 * 2**30), ("1.5kb", 1500), (" 7 B ", 7)],
)
def test_sizes_are_read_as_transformers_spells_them(value, expected):
    assert parse_shard_size(value) == expected


@pytest.mark.parametrize("value", ["5 parsecs", "GB", "-1MB", "", 0, -3])
def test_a_size_that_is_not_one_is_refused_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"^max_shard_size=.* is invalid; expected"):
        parse_shard_size(value)
    with pytest.raises(TypeError, match=r"^max_shard_size=True is invalid"):
        parse_shard_size(True)


def test_shards_fill_in_order_and_a_large_tensor_has_its_own():
    assert plan_shards({"a": 4, "b": 4, "c": 9, "d": 1, "e": 1}, 8) == [["a", "b"], ["c"], ["d", "e"]]
    assert plan_shards({"a": 4}, 1) == [["a"]]


def test_save_pretrained_shards_above_the_size_and_reads_back_equal(tmp_path):
    model = _tiny()
    model.save_pretrained(tmp_path, max_shard_size=20_000)
    shards = sorted(p.name for p in tmp_path.glob("model-*.safetensors"))
    assert len(shards) >= 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert not (tmp_path / "model.safetensors").exists()
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    state = model.state_dict()
    assert set(index["weight_map"]) == set(state) and set(index["weight_map"].values()) == set(shards)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in state.values())
    back = vitzoo.from_pretrained(tmp_path).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(back(x), model(x))
    with reading_only(lambda key: key.startswith("blocks.1.")):
        part = read_checkpoint(tmp_path / "model.safetensors.index.json")
    assert set(part) == set(state) and torch.equal(part["blocks.1.mlp.fc1.weight"], state["blocks.1.mlp.fc1.weight"])
    assert part["head.weight"].is_meta


def test_a_new_save_removes_what_the_previous_one_left(tmp_path):
    """single -> 5 shards -> 3 shards -> single: each time exactly the new files, read back equal."""
    for seed, size in ((0, None), (1, 12_000), (2, 40_000), (3, None)):
        model = _tiny(seed)
        if size is None:
            model.save_pretrained(tmp_path)
        else:
            model.save_pretrained(tmp_path, max_shard_size=size)
        weights = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("model"))
        if size is None:
            assert weights == ["model.safetensors"]
        else:
            index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
            assert weights == sorted({*index["weight_map"].values(), "model.safetensors.index.json"})
        back = vitzoo.from_pretrained(tmp_path)
        assert all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


def test_other_files_in_the_folder_are_left_alone(tmp_path):
    (tmp_path / "model-notes.safetensors").write_text("mine")
    (tmp_path / "other-00001-of-00002.safetensors").write_text("mine")
    write_weights(tmp_path, {"a": torch.zeros(100), "b": torch.ones(100)}, max_shard_size=400)
    write_weights(tmp_path, {"a": torch.zeros(100)})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model-notes.safetensors",
        "model.safetensors",
        "other-00001-of-00002.safetensors",
    ]
