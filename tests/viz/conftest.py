"""Shared by the viz tests: tiny random-weight ViTs and a PNG reader that checks the file."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
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


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG, after checking the signature and that Pillow decodes it fully."""
    from PIL import Image

    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG file"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    with Image.open(path) as img:
        img.load()  # decodes every row: a truncated file fails here
        assert img.size == (width, height)
    return width, height


@pytest.fixture
def png_size() -> Callable[[Path], tuple[int, int]]:
    return _png_size
