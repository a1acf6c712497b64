"""PNG files of the probe: predicted masks as class indices, and a picture of a few images with
their ground truth and prediction side by side (Pillow only; no matplotlib)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..atomic import atomic_path
from ..data.masks import IGNORE_INDEX

_GAP = 4  # white pixels between the pictures


def palette() -> np.ndarray:
    """(256, 3) uint8 colours: Pascal VOC's (class 0 black; the bits of the index spread over the
    high bits of red, green and blue), the ignored label 255 VOC's cream."""
    colours = np.zeros((256, 3), dtype=np.uint8)
    for index in range(256):
        value = index
        for bit in range(8):
            for channel in range(3):
                colours[index, channel] |= ((value >> channel) & 1) << (7 - bit)
            value >>= 3
    colours[IGNORE_INDEX] = (224, 224, 192)
    return colours


def save_mask(path: str | os.PathLike[str], mask: torch.Tensor) -> Path:
    """A (H, W) uint8 mask as a grey PNG of class indices, written atomically."""
    from PIL import Image

    with atomic_path(path) as tmp:
        Image.fromarray(mask.numpy()).save(tmp, format="PNG")
    return Path(path)


def save_examples(
    path: str | os.PathLike[str], rows: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
) -> Path:
    """One row per (image (3, H, W) uint8, ground truth (H, W), prediction (H, W)): the image, the
    ground truth and the prediction in VOC's colours, side by side; rows of different widths are
    left-aligned on white. Written atomically."""
    from PIL import Image

    colours = palette()
    pictures = []
    for image, truth, pred in rows:
        parts = [image.permute(1, 2, 0).numpy(), colours[truth.numpy()], colours[pred.numpy()]]
        gap = np.full((image.shape[1], _GAP, 3), 255, dtype=np.uint8)
        pictures.append(np.concatenate([parts[0], gap, parts[1], gap, parts[2]], axis=1))
    width = max(p.shape[1] for p in pictures)
    canvas = np.full((sum(p.shape[0] + _GAP for p in pictures) - _GAP, width, 3), 255, dtype=np.uint8)
    top = 0
    for picture in pictures:
        canvas[top : top + picture.shape[0], : picture.shape[1]] = picture
        top += picture.shape[0] + _GAP
    with atomic_path(path) as tmp:
        Image.fromarray(canvas).save(tmp, format="PNG")
    return Path(path)
