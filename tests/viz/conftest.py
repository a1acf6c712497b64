"""Shared by the viz tests: tiny random-weight ViTs and a PNG reader that checks the file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from vitzoo import VisionTransformer


def _make_vit(**overrides: Any) -> VisionTransformer:
    """A 32x32 RGB ViT with 8x8 patches (a 4x4 grid), 3 heads, 2 blocks; fields overridable."""
    fields: dict[str, Any] = dict(
        img_size=32, patch_size=8, in_chans=3, num_classes=4, embed_dim=24, depth=2, num_heads=3
    )
    fields.update(overrides)
    torch.manual_seed(0)
    return VisionTransformer(**fields).eval()


@pytest.fixture
def make_vit() -> Callable[..., VisionTransformer]:
    return _make_vit
