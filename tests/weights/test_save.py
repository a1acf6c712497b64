"""vitzoo.layout and vitzoo.weights.exporter: save_pretrained / from_pretrained round trips, export to timm (which timm
loads with identical logits) and convert between layouts."""

from __future__ import annotations

import json

import pytest
import timm
import torch

import vitzoo
from vitzoo.registry import timm_counterparts
from vitzoo.weights import WeightsMismatchError

ATOL = 1e-5


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def test_save_pretrained_round_trip(tmp_path, timm_checkpoint):
    ckpt = timm_checkpoint("deit_tiny_distilled_patch16_224", depth=2)
    model = vitzoo.create("deit_ti16_distilled", weights=str(ckpt), depth=2, num_classes=4).eval()
    model.save_pretrained(tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors"]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["format"] == "vitzoo" and config["architecture"] == "deit_ti16_distilled"
    assert config["config"]["depth"] == 2 and config["config"]["distilled"] is True
    loaded = vitzoo.from_pretrained(tmp_path / "out").eval()
    assert loaded.config == model.config
    assert loaded.pretrained_cfg.mean == model.pretrained_cfg.mean
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_round_trip_keeps_labels_and_eps(tmp_path):
    model = vitzoo.create("vit_mnist", num_classes=10)
    model.pretrained_cfg = model.pretrained_cfg.replace(label_names=tuple("abcdefghij"))
    model.save_pretrained(tmp_path)
    loaded = vitzoo.from_pretrained(tmp_path)
    assert loaded.pretrained_cfg.label_names == tuple("abcdefghij")
    assert loaded.pretrained_cfg.input_size == (1, 28, 28)


def test_sincos_model_round_trip_on_meta_build(tmp_path):
    # vit_mnist_tiny's position table is a non-persistent buffer: not saved, recomputed on load.
    model = vitzoo.create("vit_mnist_tiny").eval()
    model.save_pretrained(tmp_path)
    loaded = vitzoo.from_pretrained(tmp_path).eval()
    assert not loaded.pos_embed.is_meta and torch.equal(loaded.pos_embed, model.pos_embed)
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_loaded_model_is_trainable(tmp_path):
    model = vitzoo.create("vit_mnist")
    model.save_pretrained(tmp_path)
    loaded = vitzoo.from_pretrained(tmp_path)
    assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad and not p.is_meta for p in loaded.parameters())
    loaded(torch.randn(2, 1, 28, 28)).sum().backward()
    assert loaded.patch_embed.proj.weight.grad is not None


@pytest.mark.parametrize("name", ["vit_ti16", "deit_ti16_distilled"])
def test_export_to_timm_identical_logits(tmp_path, name):
    torch.manual_seed(0)
    model = vitzoo.create(name, depth=2).eval()
    path = vitzoo.export(model, "timm", tmp_path / f"{name}.safetensors")
    timm_name = timm_counterparts()[name]
    reference = timm.create_model(
        timm_name, pretrained=True, depth=2, pretrained_cfg_overlay=dict(file=str(path), custom_load=False)
    ).eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL


def test_export_to_timm_merges_lora_adapters(tmp_path):
    from safetensors.torch import load_file

    from vitzoo.layers.lora import add_lora, merged_state_dict

    torch.manual_seed(0)
    model = vitzoo.create("vit_ti16", depth=1, embed_dim=24, num_heads=2, img_size=32).eval()
    add_lora(model, rank=2, targets="qkv,mlp")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_B"):
                p.normal_()
    state = load_file(vitzoo.export(model, "timm", tmp_path / "lora.safetensors"))
    merged = merged_state_dict(model)
    assert set(state) == set(merged) and all(torch.equal(state[k], merged[k]) for k in state)


def test_export_errors(tmp_path):
    with pytest.raises(WeightsMismatchError, match="representation layer"):
        vitzoo.export(vitzoo.create("vit_b16_in21k", depth=1), "timm", tmp_path / "x.safetensors")
    with pytest.raises(WeightsMismatchError, match="sincos"):
        vitzoo.export(vitzoo.create("vit_mnist_tiny"), "timm", tmp_path / "x.safetensors")
    with pytest.raises(WeightsMismatchError, match="convolutional stem"):
        vitzoo.export(vitzoo.create("vit_mnist"), "timm", tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match=r"ending in \.safetensors"):
        vitzoo.export(vitzoo.create("vit_mnist", conv_stem=(), patch_size=7), "timm", tmp_path / "x.bin")
    with pytest.raises(ValueError, match="unknown export format 'onnx'"):
        vitzoo.export(vitzoo.create("vit_mnist"), "onnx", tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def test_convert_transformers_dir_to_vitzoo(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    hf = ViTForImageClassification(
        ViTConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=32,
            patch_size=8,
            num_labels=3,
        )
    ).eval()
    hf.save_pretrained(tmp_path / "hf")
    written = vitzoo.convert(tmp_path / "hf", tmp_path / "ours")
    model = vitzoo.from_pretrained(written).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert max_diff(model(x), hf(pixel_values=x).logits) <= ATOL
    assert model.config.norm_eps == 1e-12


def test_convert_timm_hub_dir_to_timm_file_and_single_vitzoo_file(tmp_path, timm_checkpoint):
    ckpt = timm_checkpoint("vit_small_patch16_224", depth=2)
    out = vitzoo.convert(ckpt, tmp_path / "converted.safetensors", to="timm")
    reference = timm.create_model(
        "vit_small_patch16_224", pretrained=True, depth=2, pretrained_cfg_overlay=dict(file=str(out), custom_load=False)
    ).eval()
    original = timm.create_model(
        "vit_small_patch16_224",
        pretrained=True,
        depth=2,
        pretrained_cfg_overlay=dict(file=str(ckpt / "model.safetensors"), custom_load=False),
    ).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.equal(reference(x), original(x))
    single = vitzoo.convert(ckpt, tmp_path / "single.safetensors", to="vitzoo", model=vitzoo.create("vit_s16", depth=2))
    model = vitzoo.create("vit_s16", weights=str(single), depth=2).eval()
    with torch.no_grad():
        assert max_diff(model(x), original(x)) <= ATOL


def test_convert_needs_the_architecture_for_a_bare_file(tmp_path):
    model = vitzoo.create("vit_ti16", depth=1)
    vitzoo.export(model, "timm", tmp_path / "bare.safetensors")
    with pytest.raises(WeightsMismatchError, match="number of attention heads is not stated"):
        vitzoo.convert(tmp_path / "bare.safetensors", tmp_path / "out")
    with pytest.raises(ValueError, match="unknown target format"):
        vitzoo.convert(tmp_path / "bare.safetensors", tmp_path / "out", to="keras")


ROPE_LAYOUTS = [
    pytest.param(dict(rope="cat", pos_embed="none", k_bias=False), id="cat-qv-bias"),
    pytest.param(dict(rope="mixed", pos_embed="none", qkv_fused=False, k_bias=False), id="mixed-unfused"),
    pytest.param(
        dict(rope="dinov3", pos_embed="none", reg_tokens=4, rope_rotate_half=True, dynamic_img_size=True), id="dinov3"
    ),
]


@pytest.mark.parametrize("fields", ROPE_LAYOUTS)
def test_rope_model_round_trip_on_meta_build(tmp_path, fields):
    """The rotary embedding's cache and EVA's zero k bias are non-persistent buffers: not saved,
    real data again in the model built on the meta device for loading."""
    torch.manual_seed(0)
    model = vitzoo.VisionTransformer(img_size=32, patch_size=16, embed_dim=32, depth=2, num_heads=2, **fields).eval()
    model.save_pretrained(tmp_path)
    loaded = vitzoo.from_pretrained(tmp_path).eval()
    assert loaded.config == model.config
    assert not any(t.is_meta for t in loaded.buffers())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_rope_settings_no_tensor_shows_must_match_the_model(tmp_path):
    model = vitzoo.VisionTransformer(img_size=32, patch_size=16, embed_dim=32, depth=1, num_heads=2, rope="cat")
    model.save_pretrained(tmp_path)
    with pytest.raises(WeightsMismatchError, match="trained with rope='cat', the model has rope=''"):
        vitzoo.create("vit_ti16", weights=str(tmp_path), img_size=32, embed_dim=32, depth=1, num_heads=2)
