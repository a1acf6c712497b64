"""The factorized position table (layers/pos_factorized.py, `ViTConfig.pos_embed="factorized"`)
against timm's NaFlexVit with `pos_embed='factorized'` (random weights, depth 2, its state dict
read by vitzoo): images at the table's own size and others, and a patch-sequence batch, per axis
and aspect-preserving; plus the config's rules, the parameter count and the model's other paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo.layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES
from vitzoo.layers.pos_factorized import factorized_table, resample_axis
from vitzoo.model import VisionTransformer, ViTConfig
from vitzoo.weights.errors import WeightsMismatchError

ATOL = 1e-5
TINY = dict(embed_dim=64, depth=2, num_heads=4)
FACTORIZED = dict(pos_embed="factorized", no_embed_class=True, reg_tokens=2, img_size=(64, 80), dynamic_img_size=True)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


def test_table_is_row_plus_column_and_resamples_each_axis():
    y, x = torch.randn(1, 4, 8), torch.randn(1, 5, 8)
    table = factorized_table(y, x, (4, 5))
    assert torch.equal(table.reshape(4, 5, 8), y[0, :, None] + x[0, None, :])
    assert resample_axis(y, 4) is y
    # aspect-preserving: both axes to the longer side (8), then the first rows / columns
    square = factorized_table(y, x, (3, 8), "timm_square").reshape(3, 8, 8)
    assert torch.allclose(square[:, 0] - square[0, 0], resample_axis(y, 8)[0, :3] - resample_axis(y, 8)[0, 0])
    with pytest.raises(ValueError, match="pos_resample='siglip2' is invalid for a factorized table"):
        factorized_table(y, x, (2, 2), "siglip2")


def test_config_rules_and_num_params():
    config = ViTConfig(**TINY, **FACTORIZED)
    model = VisionTransformer(config)
    assert model.pos_embed is None and model.pos_embed_y.shape == (1, 4, 64) and model.pos_embed_x.shape == (1, 5, 64)
    assert config.num_params == sum(p.numel() for p in model.parameters())
    assert {"pos_embed_y", "pos_embed_x"} <= model.no_weight_decay()
    with pytest.raises(ValueError, match="expected no_embed_class=True"):
        ViTConfig(**TINY, pos_embed="factorized")
    with pytest.raises(ValueError, match="pos_resample='siglip2' is invalid"):
        ViTConfig(**TINY, **FACTORIZED, pos_resample="siglip2")
    with pytest.raises(ValueError, match="cannot be combined with conv_stem"):
        ViTConfig(**TINY, **FACTORIZED, conv_stem=(24, 48, 96))
    with pytest.raises(WeightsMismatchError, match="a factorized position table"):
        vitzoo.weights.exporter.timm_state_dict(model)


timm = pytest.importorskip("timm")
needs_naflexvit = pytest.mark.skipif(
    not timm.is_model("naflexvit_base_patch16_gap"), reason=f"timm {timm.__version__} has no NaFlexVit (timm >= 1.0.16)"
)


def _randomise(model: torch.nn.Module) -> torch.nn.Module:
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def _timm_factorized(square: bool) -> torch.nn.Module:
    args: dict[str, Any] = dict(pos_embed="factorized", pos_embed_ar_preserving=square, pos_embed_grid_size=(4, 5))
    return _randomise(timm.create_model("naflexvit_base_patch16_gap", num_classes=5, **TINY, **args))


def _batch(sizes: list[tuple[int, int]], length: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    patches = torch.zeros(len(sizes), length, 16 * 16 * 3)
    coord = torch.zeros(len(sizes), length, 2, dtype=torch.int64)
    valid = torch.zeros(len(sizes), length, dtype=torch.bool)
    for i, (rows, cols) in enumerate(sizes):
        n = rows * cols
        patches[i, :n], valid[i, :n] = torch.randn(n, 16 * 16 * 3, generator=g), True
        coord[i, :n] = torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), -1).flatten(
            0, 1
        )
    return {PATCHES: patches, PATCH_COORD: coord, PATCH_VALID: valid}


@needs_naflexvit
@pytest.mark.parametrize(
    "square", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["aspect_preserving", "per_axis"]
)
def test_equals_timm_naflexvit_factorized(square, tmp_path: Path):
    from safetensors.torch import save_file

    reference = _timm_factorized(square)
    save_file(reference.state_dict(), tmp_path / "model.safetensors")
    # aspect-preserving: timm's naflexvit_base_patch16_parfac_gap through its registered name
    name, overrides = (
        ("naflexvit_b16_parfac_gap", {})
        if square
        else ("naflexvit_b16_gap", {"pos_embed": "factorized", "pos_resample": "timm"})
    )
    tiny = dict(**TINY, img_size=(64, 80), num_classes=5)
    model = vitzoo.create(name, weights=tmp_path / "model.safetensors", **tiny, **overrides).eval()
    assert model.config.pos_resample == ("timm_square" if square else "timm")
    batch = _batch([(4, 5), (2, 7), (5, 3), (1, 1)], length=21)
    valid = batch[PATCH_VALID]
    with torch.no_grad():
        for size in [(64, 80), (48, 112), (96, 32)]:  # the tables' own grid, wide, tall
            image = torch.randn(2, 3, *size)
            assert max_diff(model(image), reference(image)) <= ATOL
        assert max_diff(model(batch), reference(batch)) <= ATOL
        ours, theirs = model.forward_features(batch)[PATCHES], reference.forward_features(*_timm_args(batch))[PATCHES]
        p = model.num_prefix_tokens
        assert max_diff(ours[:, p:][valid], theirs[:, p:][valid]) <= ATOL
        # the tables matter: zeroed, the outputs part
        model.pos_embed_y.zero_()
        assert max_diff(model(batch), reference(batch)) > 1e-3


def _timm_args(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return batch[PATCHES], batch[PATCH_COORD], batch[PATCH_VALID]


@pytest.mark.parametrize(("rule", "size"), [("timm", (48, 112)), ("timm_square", (96, 96))])
def test_set_input_size_keeps_what_forward_adds(rule, size):
    torch.manual_seed(0)
    model = VisionTransformer(**TINY, **FACTORIZED, pos_resample=rule).eval()
    image = torch.randn(1, 3, *size)
    with torch.no_grad():
        before = model(image)
        model.set_input_size(size)
        assert (model.pos_embed_y.shape[1], model.pos_embed_x.shape[1]) == (size[0] // 16, size[1] // 16)
        assert model.config.num_params == sum(p.numel() for p in model.parameters())
        assert max_diff(model(image), before) <= ATOL
    if rule == "timm_square":
        with pytest.raises(ValueError, match="only a square grid keeps them"):
            model.set_input_size((48, 112))


def test_intermediates_and_dense_features():
    torch.manual_seed(0)
    model = VisionTransformer(**TINY, **{**FACTORIZED, "dynamic_img_size": False}).eval()
    image = torch.randn(1, 3, 64, 80)
    with torch.no_grad():
        inter = model.forward_intermediates(image, indices=[0, 1], intermediates_only=True)
        assert [tuple(t.shape) for t in inter] == [(1, 64, 4, 5)] * 2
        maps = vitzoo.dense_features(model, torch.randn(1, 3, 32, 48))
        assert tuple(maps.shape) == (1, 64, 2, 3)


@pytest.mark.slow
def test_torch_export_and_fx_trace():
    torch.manual_seed(0)
    model = VisionTransformer(**TINY, **{**FACTORIZED, "dynamic_img_size": False}).eval()
    image = torch.randn(1, 3, 64, 80)
    program = torch.export.export(model, (image,))
    assert max_diff(program.module()(image), model(image)) <= ATOL
    traced = torch.fx.symbolic_trace(model)
    assert max_diff(traced(image), model(image)) <= ATOL
