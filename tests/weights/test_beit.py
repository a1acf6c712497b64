"""BEiT (timm's beit.py; transformers' BeitModel and Data2VecVisionModel) through vitzoo's registered
names: timm's random weights at reduced depth and width compute timm's outputs at the native size
and, after `set_input_size`, at another (the relative position tables resized as timm resizes
them); the backbone API, the exports and `vitzoo.optimize` work or refuse by name; transformers'
layouts load and compute transformers' outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

import vitzoo
from vitzoo import deploy
from vitzoo.layers import capture_attention
from vitzoo.layers.naflex import PatchBatchError
from vitzoo.weights import WeightsFileError
from vitzoo.weights.keymaps import to_vitzoo

timm = pytest.importorskip("timm")

ATOL = 1e-5
REDUCED = dict(depth=2, embed_dim=96, num_heads=2)
SIZE, OTHER = 64, (96, 80)  # a 4 x 4 grid; then 6 x 5


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


def _pair(arch: str, name: str, num_classes: int = 10) -> tuple[torch.nn.Module, Any]:
    """timm's `arch` with random weights and vitzoo's registered `name` holding them."""
    torch.manual_seed(0)
    theirs = timm.create_model(arch, pretrained=False, img_size=SIZE, num_classes=num_classes, **REDUCED).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.1)
    ours = vitzoo.create(name, pretrained=False, img_size=SIZE, num_classes=num_classes, **REDUCED).eval()
    ours.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=arch).state, strict=True)
    return theirs, ours


def _compare(theirs: torch.nn.Module, ours: Any, x: torch.Tensor) -> float:
    """The largest difference of logits, features and every block's maps (normalised, with the class token)."""
    with torch.no_grad():
        diffs = [_max_diff(ours(x), theirs(x)), _max_diff(ours.forward_features(x), theirs.forward_features(x))]
        kw: dict[str, Any] = dict(indices=[0, 1], norm=True, return_prefix_tokens=True, intermediates_only=True)
        for (a, pa), (b, pb) in zip(ours.forward_intermediates(x, **kw), theirs.forward_intermediates(x, **kw)):
            diffs += [_max_diff(a, b), _max_diff(pa, pb)]
    return max(diffs)


@pytest.mark.parametrize(
    ("arch", "name"),
    [
        ("beit_base_patch16_224", "beit_b16"),
        pytest.param("beitv2_large_patch16_224", "beitv2_l16", marks=pytest.mark.slow),
    ],
)
def test_registered_name_computes_timms_at_its_size_and_another(arch, name):
    theirs, ours = _pair(arch, name)
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    assert _compare(theirs, ours, x) <= ATOL
    if not hasattr(theirs, "set_input_size"):
        pytest.skip("this timm's Beit has no set_input_size (timm >= 1.0.10 has)")
    theirs.set_input_size(OTHER)
    ours.set_input_size(OTHER)
    assert ours.config.img_size == OTHER and ours.pretrained_cfg.input_size == (3, *OTHER)
    x = torch.randn(2, 3, *OTHER, generator=torch.Generator().manual_seed(2))
    assert _compare(theirs, ours, x) <= ATOL
    assert ours.config.num_params == sum(p.numel() for p in theirs.parameters())
    assert {"blocks.0.rel_pos.relative_position_bias_table", "cls_token"} <= ours.no_weight_decay()  # as timm lists


def test_sizes_per_call_are_refused_by_name():
    with pytest.raises(ValueError, match=r"rel_pos_table=True cannot be combined with dynamic_img_size=True"):
        vitzoo.create("beit_b16", dynamic_img_size=True, **REDUCED)
    model = vitzoo.create("beit_b16", img_size=SIZE, **REDUCED).eval()
    with pytest.raises(ValueError, match=r"rel_pos_table=True cannot be combined with dynamic_img_size"):
        vitzoo.dense_features(model, torch.randn(1, 3, 96, 80))
    with pytest.raises(PatchBatchError, match=r"BEiT's relative position table \(rel_pos_table=True\)"):
        model({"patches": torch.zeros(1, 4, 768), "patch_coord": torch.zeros(1, 4, 2, dtype=torch.long)})
    with pytest.raises(ValueError, match=r"rel_pos_table=True cannot be combined with class_token=False"):
        vitzoo.create("beit_b16", class_token=False, **REDUCED)


def test_backbone_api_features_dense_and_optimize():
    model = vitzoo.create("beit_b16", img_size=SIZE, **REDUCED).eval()
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        maps = model.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
        features = vitzoo.create("beit_b16", img_size=SIZE, features_only=True, out_indices=(0, 1), **REDUCED)
        features.load_state_dict({f"model.{k}": v for k, v in model.state_dict().items()}, strict=False)
        for got, expected in zip(features.eval()(x), maps):
            assert _max_diff(got, expected) == 0.0
        dense = vitzoo.dense_features(model, x, layers=[1], norm=False)
        assert _max_diff(dense[0], maps[1]) == 0.0
        with capture_attention(model) as weights:
            model(x)
    assert len(weights) == 2 and weights[0].shape == (2, 2, 17, 17)
    fast = vitzoo.optimize(model, x, candidates=["eager", "eager-explicit"], cache=False)
    with torch.no_grad():
        assert _max_diff(fast(x), model(x)) <= ATOL


@pytest.mark.slow  # tens of seconds: torch.export and the ONNX exporter trace the model
def test_exports_torch_export_onnx_and_timm(tmp_path):
    if not hasattr(torch.export, "Dim"):
        pytest.skip(f"torch.export programs need torch >= 2.2; this is torch {torch.__version__}")
    theirs, ours = _pair("beit_base_patch16_224", "beit_b16")
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        expected = ours(x)
        program = deploy.load_program(deploy.export(ours, tmp_path / "beit.pt2"))
        assert _max_diff(program(x), expected) <= ATOL
    ort = pytest.importorskip("onnxruntime")
    path = deploy.export(ours, tmp_path / "beit.onnx")
    (got,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": x.numpy()})
    assert _max_diff(torch.from_numpy(got), expected) <= 1e-4
    vitzoo.export(ours, "timm", tmp_path / "timm.safetensors")
    back = timm.create_model(
        "beit_base_patch16_224",
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(tmp_path / "timm.safetensors"), custom_load=False, num_classes=10),
        img_size=SIZE,
        num_classes=10,
        **REDUCED,
    ).eval()
    with torch.no_grad():
        assert _max_diff(back(x), theirs(x)) == 0.0


# ----------------------------------------------------------------------------- transformers
transformers = pytest.importorskip("transformers")
TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    image_size=32,
    patch_size=8,
    use_relative_position_bias=True,
    layer_scale_init_value=0.1,
)


def _hf_model(cls: str, config: str, **kw: Any) -> torch.nn.Module:
    if not hasattr(transformers, cls):
        pytest.skip(f"transformers {transformers.__version__} has no {cls}")
    model = getattr(transformers, cls)(getattr(transformers, config)(**kw))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # random values everywhere: zero biases and unit norms would hide mix-ups
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model.eval()


@pytest.mark.parametrize(
    ("cls", "config", "change", "output"),
    [
        ("BeitForImageClassification", "BeitConfig", dict(num_labels=5), "logits"),
        ("BeitModel", "BeitConfig", dict(use_mean_pooling=False, use_absolute_position_embeddings=True), "pooled"),
        ("Data2VecVisionModel", "Data2VecVisionConfig", {}, "tokens"),  # saved without its pooler: no norm
        pytest.param(
            "Data2VecVisionForImageClassification",
            "Data2VecVisionConfig",
            dict(num_labels=5, layer_scale_init_value=0.0),
            "logits",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_transformers_layouts_compute_what_transformers_computes(cls, config, change, output, tmp_path):
    hf = _hf_model(cls, config, **{**TINY, **change})
    hf.save_pretrained(tmp_path)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = hf(pixel_values=x)
        model = vitzoo.from_pretrained(tmp_path).eval()
        if output == "logits":
            assert _max_diff(model(x), out.logits) <= ATOL
        elif output == "pooled":
            assert _max_diff(model.forward_head(model.forward_features(x), pre_logits=True), out.pooler_output) <= ATOL
        else:
            assert _max_diff(model.forward_features(x), out.last_hidden_state) <= ATOL
            assert not model.config.final_norm and model.config.global_pool == "avg"
    assert model.config.rel_pos_table and not model.config.k_bias


def test_a_bare_transformers_weights_file_keeps_beits_eps_under_a_registered_name(tmp_path):
    """Without config.json the tensors imply the eps: BEiT's LayerScale must not pass for DINOv2's
    (transformers' BeitConfig.layer_norm_eps, not Dinov2Config's)."""
    hf = _hf_model("BeitModel", "BeitConfig", **{**TINY, "use_mean_pooling": False})
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, tmp_path / "model.safetensors")
    shrink = dict(depth=2, embed_dim=64, num_heads=4, img_size=32, patch_size=8, mlp_ratio=2.0)
    model = vitzoo.create(
        "beit_b16", **shrink, global_pool="token", fc_norm=False, weights=tmp_path / "model.safetensors"
    )
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert _max_diff(model.eval().forward_features(x), hf(pixel_values=x).last_hidden_state) <= ATOL
    assert model.config.norm_eps == transformers.BeitConfig().layer_norm_eps


def test_transformers_shared_table_is_refused_by_name(tmp_path):
    hf = _hf_model("BeitModel", "BeitConfig", **{**TINY, "use_relative_position_bias": False})
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "use_shared_relative_position_bias": True}))
    with pytest.raises(WeightsFileError, match=r"use_shared_relative_position_bias=True is not supported") as err:
        vitzoo.from_pretrained(tmp_path)
    assert str(Path(tmp_path) / "config.json") in str(err.value)
