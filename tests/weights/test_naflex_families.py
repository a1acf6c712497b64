"""Patch-sequence (NaFlex) batches through loaded weights, against the libraries that define them.

* SigLIP 2 NaFlex: transformers' Siglip2VisionModel (random weights, saved in its own layout, read
  by vitzoo's loader) and vitzoo fed the same batch, built by transformers' own
  Siglip2ImageProcessor from real photos (square, wide and tall crops) at two patch budgets:
  the pooled output and every valid token agree.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo.layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES

skimage_data = pytest.importorskip("skimage.data")
transformers = pytest.importorskip("transformers")
needs_siglip2 = pytest.mark.skipif(
    not hasattr(transformers, "Siglip2VisionModel"), reason="needs transformers >= 4.49 (Siglip2VisionModel)"
)

ATOL = 1e-5
HF_TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item() if a.numel() else 0.0


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def photo_crops() -> list[Image.Image]:
    """A square, a wide and a tall crop of real photos."""
    astronaut, coffee = skimage_data.astronaut(), skimage_data.coffee()
    return [
        Image.fromarray(astronaut[:300, :300]),
        Image.fromarray(coffee[:150, :]),
        Image.fromarray(astronaut[:, 100:260]),
    ]


def batch_from_siglip2(inputs: Any) -> dict[str, torch.Tensor]:
    """Siglip2ImageProcessor's output as a vitzoo patch-sequence batch: each image's patches come
    first, row-major over its spatial_shapes grid, then padding."""
    mask = inputs["pixel_attention_mask"].bool()
    coord = torch.zeros(*mask.shape, 2, dtype=torch.int64)
    for i, (rows, cols) in enumerate(inputs["spatial_shapes"].tolist()):
        n = torch.arange(rows * cols)
        coord[i, : rows * cols] = torch.stack([n // cols, n % cols], dim=-1)
    return {PATCHES: inputs["pixel_values"], PATCH_COORD: coord, PATCH_VALID: mask}


@needs_siglip2
@pytest.mark.parametrize("budget", [16, 40])
def test_siglip2_naflex_equals_transformers(tmp_path, budget):
    config = transformers.Siglip2VisionConfig(**HF_TINY, num_patches=16, patch_size=16)
    hf = randomise(transformers.Siglip2VisionModel(config), 3)
    hf.save_pretrained(tmp_path)
    model = vitzoo.from_pretrained(tmp_path).eval()
    assert model.config.pos_resample == "siglip2" and model.config.img_size == 64  # the table's own 4 x 4 grid
    processor = transformers.Siglip2ImageProcessor(patch_size=16, max_num_patches=budget)
    inputs = processor(images=photo_crops(), return_tensors="pt")
    shapes = [tuple(s) for s in inputs["spatial_shapes"].tolist()]
    assert len(set(shapes)) == 3 and any(r > c for r, c in shapes) and any(r < c for r, c in shapes)
    batch = batch_from_siglip2(inputs)
    with torch.no_grad():
        expected = hf(**inputs)
        pooled = model(batch)
        tokens = model.forward_features(batch)
    valid = batch[PATCH_VALID]
    assert max_diff(pooled, expected.pooler_output) <= ATOL
    assert torch.equal(tokens[PATCH_VALID], valid)
    assert max_diff(tokens[PATCHES][valid], expected.last_hidden_state[valid]) <= ATOL


# ---------------------------------------------------------------------------- timm's NaFlexVit
timm = pytest.importorskip("timm")
needs_naflexvit = pytest.mark.skipif(
    not timm.is_model("naflexvit_base_patch16_gap"), reason=f"timm {timm.__version__} has no NaFlexVit (timm >= 1.0.16)"
)
TIMM_TINY = dict(embed_dim=64, depth=2, num_heads=4, pos_embed_grid_size=(4, 4))
# (timm architecture, vitzoo name, NaFlexVitCfg overrides): the learned table by each of its three
# resizing rules, and the three rotary kinds (with and without a table).
TWINS = [
    ("naflexvit_base_patch16_gap", "naflexvit_b16_gap", {}),
    ("naflexvit_base_patch16_par_gap", "naflexvit_b16_par_gap", {}),
    ("naflexvit_base_patch16_siglip", "naflexvit_b16_siglip", {}),
    ("naflexvit_base_patch16_gap", "naflexvit_b16_gap", dict(rope_type="axial", pos_embed="none")),
    ("naflexvit_base_patch16_map", "naflexvit_b16_map", dict(rope_type="mixed")),
    ("naflexvit_base_patch16_gap", "naflexvit_b16_gap", dict(rope_type="dinov3", rope_rotate_half=True)),
]


def timm_batch(sizes: list[tuple[int, int]], length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random images of `sizes`, cut by timm's own batch_patchify and padded to `length` patches."""
    from timm.models.naflexvit import batch_patchify

    g = torch.Generator().manual_seed(seed)
    patches = torch.zeros(len(sizes), length, 16 * 16 * 3)
    coord = torch.zeros(len(sizes), length, 2, dtype=torch.int64)
    valid = torch.zeros(len(sizes), length, dtype=torch.bool)
    for i, (h, w) in enumerate(sizes):
        p, (rows, cols) = batch_patchify(torch.randn(1, 3, h, w, generator=g), (16, 16))
        n = rows * cols
        patches[i, :n], valid[i, :n] = p[0], True
        coord[i, :n] = torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), -1).reshape(
            n, 2
        )
    return {PATCHES: patches, PATCH_COORD: coord, PATCH_VALID: valid}


def _twin(arch: str, overrides: dict[str, Any], tmp_path) -> tuple[torch.nn.Module, torch.nn.Module]:
    """timm's model with random weights, saved in timm's hub layout, and vitzoo's read of it."""
    from timm.models._hub import save_for_hf

    reference = randomise(timm.create_model(arch, num_classes=5, **TIMM_TINY, **overrides), 4)
    save_for_hf(reference, str(tmp_path), model_args=dict(num_classes=5, **TIMM_TINY, **overrides))
    return reference, vitzoo.from_pretrained(tmp_path).eval()


@needs_naflexvit
@pytest.mark.parametrize(("arch", "name", "overrides"), TWINS)
def test_timm_naflexvit_twin(arch, name, overrides, tmp_path):
    reference, model = _twin(arch, overrides, tmp_path)
    registered = vitzoo.model_info(name)["config"]
    rope = {"axial": "cat"}.get(overrides.get("rope_type", ""), overrides.get("rope_type", ""))
    assert (model.config.pos_resample, model.config.rope) == (registered["pos_resample"], rope)
    assert model.config.dynamic_img_size and (model.config.no_embed_class or not model.num_prefix_tokens)
    batch = timm_batch([(64, 64), (32, 112), (80, 48), (16, 16)], length=20)
    valid = batch[PATCH_VALID]
    with torch.no_grad():
        assert max_diff(model(batch), reference(batch)) <= ATOL
        theirs = reference.forward_features(batch[PATCHES], batch[PATCH_COORD], batch[PATCH_VALID])[PATCHES]
        ours = model.forward_features(batch)[PATCHES]
        p = model.num_prefix_tokens
        assert max_diff(ours[:, :p], theirs[:, :p]) <= ATOL
        assert max_diff(ours[:, p:][valid], theirs[:, p:][valid]) <= ATOL
        args = dict(indices=[0, 1], output_fmt="NLC", output_dict=True)
        mine, timms = model.forward_intermediates(batch, **args), reference.forward_intermediates(batch, **args)
        assert torch.equal(mine[PATCH_VALID], timms[PATCH_VALID])
        for a, b in zip(mine["image_intermediates"], timms["image_intermediates"]):
            assert max_diff(a[valid], b[valid]) <= ATOL * b.abs().max().item()  # un-normalised tokens: relative
        image = torch.randn(2, 3, 48, 80)  # an image tensor at another size: the table resized the same way
        assert max_diff(model(image), reference(image)) <= ATOL


@needs_naflexvit
def test_timm_naflexvit_state_dict_and_timm_source(tmp_path, monkeypatch):
    """A bare timm NaFlexVit state dict under its vitzoo name, and "timm:<name>" (timm's own loader)."""
    from safetensors.torch import save_file

    reference = randomise(timm.create_model("naflexvit_base_patch16_siglip", **TIMM_TINY), 5)
    save_file(reference.state_dict(), tmp_path / "model.safetensors")
    tiny = dict(embed_dim=64, depth=2, num_heads=4, img_size=64)
    bare = vitzoo.create("naflexvit_b16_siglip", weights=tmp_path / "model.safetensors", **tiny).eval()
    monkeypatch.setattr(timm, "create_model", lambda *args, **kwargs: reference)
    named = vitzoo.from_pretrained("timm:naflexvit_base_patch16_siglip.v2_webli").eval()
    batch = timm_batch([(48, 96), (64, 64)], length=18, seed=1)
    with torch.no_grad():
        expected = reference(batch)
        for model in (bare, named):
            assert model.config.pos_resample == "siglip2"
            assert max_diff(model(batch), expected) <= ATOL


@needs_naflexvit
@pytest.mark.parametrize("budget", [16, 40])
@pytest.mark.parametrize(("arch", "overrides"), [TWINS[0][::2], TWINS[5][::2]], ids=["learned", "dinov3_rope"])
def test_timm_naflexvit_twin_on_photos_end_to_end(arch, overrides, budget, tmp_path):
    """Real photos (square, wide, tall) at two budgets, each library with its own preprocessing:
    timm's NaFlex evaluation transforms and collator for timm, `vitzoo.naflex.preprocess` for vitzoo."""
    from timm.data.naflex_dataset import NaFlexCollator
    from timm.data.transforms_factory import transforms_imagenet_eval

    reference, model = _twin(arch, overrides, tmp_path)
    cfg = model.pretrained_cfg
    tf = transforms_imagenet_eval(
        naflex=True,
        patch_size=16,
        max_seq_len=budget,
        interpolation=cfg.interpolation,
        mean=cfg.mean,
        std=cfg.std,
        patchify=True,
    )
    theirs, _ = NaFlexCollator(max_seq_len=budget)([(tf(img), 0) for img in photo_crops()])
    ours = vitzoo.naflex.preprocess(model, photo_crops(), max_patches=budget)
    grids = {tuple(s) for s in ours["spatial_shapes"].tolist()}
    assert len(grids) == 3 and all(r * c <= budget for r, c in grids)  # three aspect ratios
    with torch.no_grad():
        assert max_diff(model(ours), reference(theirs)) <= ATOL
