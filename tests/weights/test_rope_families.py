"""The RoPE families (EVA-02, RoPE-ViT, Perception Encoder) load from timm's hub repository (the
registered source, on the local fake Hub), from a bare weights file and through "timm:<name>", and
compute what timm's own model computes.

Each reference is timm's model of the registered architecture at a reduced width and depth (the
same code path: 48 wide, 2 heads, 2 blocks) with random weights; every comparison is fp32, max
|diff| <= 1e-5 at the model's size (forward, forward_features, pre-logits, forward_intermediates)
and <= 1e-4 at other input sizes (dynamic_img_size: 224x320 and 512x512 pixels).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo import registry

timm = pytest.importorskip("timm")
from timm.models._hub import save_for_hf  # noqa: E402

ATOL, SIZE_ATOL = 1e-5, 1e-4
# 48 wide: a head width divisible by 4 (RoPE), 8 pool heads (PE), EVA-02's packed SwiGLU exact
TINY = dict(embed_dim=48, num_heads=2, depth=2)
# One release per layout: packed SwiGLU (EVA-02 T/S), sub-LN SwiGLU with separate q/k/v (B/L),
# RoPE-Mixed without positions, PE Core (attention pool) and Spatial (no final norm). Every
# registered config also loads from timm's layout in tests/weights/test_convert.py, and axial
# RoPE-ViT is compared with timm in tests/test_model.py.
SOURCES = [
    "eva02_t14.mim_in22k",
    "eva02_b14.mim_in22k",
    "vit_b16_rope_mixed.naver_in1k",
    "pe_core_t.fb",
    "pe_spatial_s.fb",
]


def _timm_name(name: str) -> str:
    _, pcfg = registry.get_pretrained_cfg(name)
    assert pcfg is not None and pcfg.source is not None
    tagged = pcfg.source.removeprefix("hf-hub:timm/")
    if not timm.is_model(tagged):
        pytest.skip(f"timm {timm.__version__} has no {tagged.split('.')[0]} (newer timm has)")
    return tagged


def _img(name: str) -> int:
    entry = registry.get_entry(name)
    assert entry.config is not None
    return 4 * int(entry.config.patch_size)  # type: ignore[call-overload]


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


@pytest.fixture(scope="module")
def tiny_timm(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., tuple[torch.nn.Module, Path]]:
    """`tiny_timm("name.tag")`: timm's reference with random weights, saved in timm's hub layout."""
    made: dict[tuple[str, bool], tuple[torch.nn.Module, Path]] = {}

    def make(name: str, dynamic: bool = False) -> tuple[torch.nn.Module, Path]:
        if (name, dynamic) not in made:
            args = dict(TINY, img_size=_img(name), dynamic_img_size=dynamic)
            model = timm.create_model(_timm_name(name), **args)
            g = torch.Generator().manual_seed(len(made))
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)  # LayerScale's 1e-5 would hide the blocks
            out = tmp_path_factory.mktemp(f"{name.replace('.', '-')}-{dynamic}")
            save_for_hf(model, out, model_args=args, safe_serialization=True)
            made[name, dynamic] = model.eval(), out
        return made[name, dynamic]

    return make


def _assert_equal_outputs(ours: torch.nn.Module, theirs: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        feats = theirs.forward_features(x)
        assert _max_diff(ours.forward_features(x), feats) <= ATOL
        assert _max_diff(ours(x), theirs(x)) <= ATOL
        assert _max_diff(ours.forward_head(feats, pre_logits=True), theirs.forward_head(feats, pre_logits=True)) <= ATOL
        _, maps = ours.forward_intermediates(x, indices=[0, 1])
        _, their_maps = theirs.forward_intermediates(x, indices=[0, 1])
        assert max(_max_diff(a, b) for a, b in zip(maps, their_maps)) <= ATOL


@pytest.mark.parametrize("name", SOURCES)
def test_hub_repo_file_and_timm_loader_give_timms_outputs(name, tiny_timm, fake_hub, hf_cache, monkeypatch):
    reference, ckpt = tiny_timm(name)
    entry, pcfg = registry.get_pretrained_cfg(name)
    assert pcfg is not None and pcfg.source is not None
    fake_hub.publish_dir(pcfg.source.removeprefix("hf-hub:"), ckpt)
    size = _img(name)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    from_hub = vitzoo.create(name, **TINY, img_size=size).eval()  # the tag alone asks for its weights
    assert vitzoo.registry.count_parameters(from_hub) == sum(p.numel() for p in reference.parameters())
    _assert_equal_outputs(from_hub, reference, x)
    from_file = vitzoo.create(entry.name, weights=ckpt / "model.safetensors", **TINY, img_size=size).eval()
    _assert_equal_outputs(from_file, reference, x)
    # "timm:<name>": the rotary embedding's settings are read off timm's model (handed the tiny one)
    monkeypatch.setattr(timm, "create_model", lambda *args, **kwargs: reference)
    from_timm = vitzoo.create(entry.name, weights=f"timm:{_timm_name(name)}", **TINY, img_size=size).eval()
    _assert_equal_outputs(from_timm, reference, x)
    assert from_timm.config.rope == entry.config.rope  # type: ignore[union-attr]
    cfg = from_hub.pretrained_cfg
    assert (cfg.source, cfg.license, cfg.mean, cfg.crop_pct) == (pcfg.source, pcfg.license, pcfg.mean, pcfg.crop_pct)


@pytest.mark.parametrize("name", ["eva02_t14.mim_in22k"])
def test_other_input_sizes_equal_timm(name, tiny_timm):
    """dynamic_img_size: the rotary embedding (rescaled to EVA's reference grid) and the learned
    table beside it follow the input, as timm's do; set_input_size fixes another size for good.
    (Each kind's embedding at other grids equals timm's exactly: tests/layers/test_rope.py.)"""
    reference, ckpt = tiny_timm(name, dynamic=True)
    base = registry.get_entry(name).name
    model = vitzoo.create(base, weights=ckpt / "model.safetensors", **TINY, img_size=_img(name), dynamic_img_size=True)
    model.eval()
    patch = _img(name) // 4
    with torch.no_grad():
        for h, w in [(224, 320), (512, 512)]:
            x = torch.randn(1, 3, h // patch * patch, w // patch * patch)
            assert _max_diff(model(x), reference(x)) <= SIZE_ATOL
    fixed = vitzoo.create(base, weights=ckpt / "model.safetensors", **TINY, img_size=_img(name)).eval()
    fixed.set_input_size(img_size=(8 * patch, 12 * patch))
    x = torch.randn(1, 3, 8 * patch, 12 * patch)
    with torch.no_grad():
        assert _max_diff(fixed(x), reference(x)) <= SIZE_ATOL


def test_export_to_timm_loads_in_timms_eva(tiny_timm, tmp_path):
    reference, ckpt = tiny_timm("vit_b16_rope_mixed.naver_in1k")
    model = vitzoo.create("vit_b16_rope_mixed", weights=ckpt, **TINY, img_size=64)
    vitzoo.export(model, "timm", tmp_path / "out.safetensors")
    back = timm.create_model(
        "vit_base_patch16_rope_mixed_224",
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(tmp_path / "out.safetensors"), custom_load=False),
        **TINY,
        img_size=64,
    ).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert _max_diff(back(x), reference(x)) <= ATOL


def test_from_pretrained_rebuilds_a_rope_family_from_its_timm_directory(tiny_timm):
    """timm's config.json names the architecture; the registry's config gives the rotary embedding."""
    reference, ckpt = tiny_timm("pe_core_t.fb")
    model = vitzoo.from_pretrained(ckpt).eval()
    assert model.config.rope == "cat" and model.config.pool_include_prefix
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert _max_diff(model(x), reference(x)) <= ATOL
