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
    assert model.config.naflex_pos == "siglip2" and model.config.img_size == 64  # the table's own 4 x 4 grid
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
    assert (pooled - expected.pooler_output).abs().max().item() <= ATOL
    assert torch.equal(tokens[PATCH_VALID], valid)
    assert (tokens[PATCHES][valid] - expected.last_hidden_state[valid]).abs().max().item() <= ATOL
