"""Feature extraction: each output is what the model computes, and an interrupted extraction
resumes from its shards to the very same features."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import vitzoo
from vitzoo.data import load_mnist_sample
from vitzoo.probe import embed, extract_features, extract_to_file, load_features
from vitzoo.probe import extract as extract_module
from vitzoo.probe.extract import partial_dir


def tiny_vit(**overrides):
    torch.manual_seed(0)
    fields = dict(img_size=16, patch_size=8, in_chans=1, embed_dim=12, depth=2, num_heads=2, num_classes=3)
    return vitzoo.VisionTransformer(vitzoo.ViTConfig(**{**fields, **overrides})).eval()


@torch.no_grad()
def test_each_output_is_the_models_own():
    model = tiny_vit(global_pool="avg", fc_norm=True, final_norm=True)
    x = torch.randn(3, 1, 16, 16)
    tokens = model.forward_features(x)
    assert torch.equal(embed(model, x, "pooled"), model.forward_head(tokens, pre_logits=True))
    assert torch.equal(embed(model, x, "cls"), tokens[:, 0])
    assert torch.equal(embed(model, x, "mean"), tokens[:, 1:].mean(dim=1))
    # the last block through the final norm is what forward_features gives
    torch.testing.assert_close(embed(model, x, "cls", block=-1), tokens[:, 0])
    first = model.norm(model.blocks[0](model._embed(x)))
    torch.testing.assert_close(embed(model, x, "mean", block=0), first[:, 1:].mean(dim=1))


def test_impossible_outputs_are_refused():
    data = load_mnist_sample().val.subset(torch.arange(4))
    with pytest.raises(ValueError, match="block needs output 'cls' or 'mean'"):
        extract_features(tiny_vit(), data, block=0)
    with pytest.raises(ValueError, match="block=2 is out of range for a model of 2 blocks"):
        extract_features(tiny_vit(), data, output="cls", block=2)
    with pytest.raises(ValueError, match="no class token"):
        extract_features(tiny_vit(class_token=False, global_pool="avg"), data, output="cls")
    with pytest.raises(ValueError, match="output='max' is invalid"):
        extract_features(tiny_vit(), data, output="max")


class StopError(Exception):
    pass


def test_an_interrupted_extraction_resumes_to_identical_features(tmp_path, monkeypatch):
    monkeypatch.setattr(extract_module, "SHARD_IMAGES", 32)  # a shard every 2 batches of 16
    data = load_mnist_sample().val.subset(torch.arange(150))  # 10 batches, the last one short
    model = tiny_vit()
    options = dict(batch_size=16, dtype="fp32", output="mean", kind="digits")
    whole = extract_features(model, data, **options)
    out = tmp_path / "f.safetensors"
    seen: list[int] = []

    def stop_after_seven(split: str, step: int) -> None:
        seen.append(step)
        if step == 6:
            raise StopError

    with pytest.raises(StopError):
        extract_to_file(model, data, out, on_batch=stop_after_seven, **options)
    assert not out.exists()
    (partial,) = tmp_path.glob(".f.safetensors.partial-*")
    assert sorted(p.name for p in partial.glob("data-*")) == [
        "data-00000000-00000002.safetensors",
        "data-00000002-00000004.safetensors",
        "data-00000004-00000006.safetensors",
    ]
    seen.clear()
    resumed = extract_to_file(model, data, out, on_batch=lambda split, step: seen.append(step), **options)
    assert seen == [6, 7, 8, 9]  # only the steps no shard held
    assert torch.equal(resumed.features, whole.features) and torch.equal(resumed.index, torch.arange(150))
    saved = load_features(out)
    assert torch.equal(saved.features, whole.features) and torch.equal(saved.labels, data.labels)
    assert not partial.exists()


def test_changed_settings_never_share_shards(tmp_path):
    base = {"settings": {"model": "m"}, "options": {"output": "cls"}}
    assert partial_dir(tmp_path / "f", base) == partial_dir(tmp_path / "f", dict(base))
    assert partial_dir(tmp_path / "f", base) != partial_dir(tmp_path / "f", {**base, "options": {"output": "mean"}})


def test_changed_data_discards_the_stale_shards_and_starts_afresh(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(extract_module, "SHARD_IMAGES", 32)
    data = load_mnist_sample().val.subset(torch.arange(64))
    model = tiny_vit()
    options = dict(batch_size=16, dtype="fp32", output="mean", kind="digits")
    out = tmp_path / "f.safetensors"

    def stop_at_three(split: str, step: int) -> None:
        if step == 2:
            raise StopError

    with pytest.raises(StopError):
        extract_to_file(model, data, out, on_batch=stop_at_three, **options)
    (stale,) = tmp_path.glob(".f.safetensors.partial-*")
    changed = replace(data, images=data.images.flip(0))  # the same labels' count, other pixels in every row
    capsys.readouterr()
    resumed = extract_to_file(model, changed, out, **options)
    assert "discarded the shards of a stopped extraction" in capsys.readouterr().err
    assert torch.equal(resumed.features, extract_features(model, changed, **options).features)
    assert not stale.exists() and not list(tmp_path.glob(".f.safetensors.partial-*"))
    assert extract_module.data_fingerprint(changed) != extract_module.data_fingerprint(data)
