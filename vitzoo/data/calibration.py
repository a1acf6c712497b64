"""Calibration images for int8 (`--calibration DIR`): the image files of a folder (its subfolders too),
each prepared as the model's evaluation transform prepares a prediction's input, stacked into one
batch for `vitzoo.optimize(..., calibration=...)` and the int8 exports.

At most MAX_IMAGES are read, spread evenly over the sorted files, so that a folder of class
subfolders gives images of every class rather than the first ones.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from ..errors import VitzooError
from .folder import UnreadableImageError, decode_image, find_image_files
from .transforms import eval_transform

MAX_IMAGES = 400  # NNCF calibrates on 300 at most; every 4th image is held out to check the answers


class CalibrationError(VitzooError, ValueError):
    """A calibration folder that cannot serve: missing, empty, or holding an unreadable image."""


def calibration_images(
    model: nn.Module, folder: str | os.PathLike[str], *, flag: str = "--calibration", limit: int = MAX_IMAGES
) -> torch.Tensor:
    """The images under `folder` as the model's inputs (N, C, H, W), float32; CalibrationError
    naming `flag` and the folder or file where they cannot serve."""
    root = Path(folder)
    if not root.is_dir():
        what = "does not exist" if not root.exists() else "is not a folder"
        raise CalibrationError(f"{flag} {str(root)!r} {what}; expected a folder of images")
    files, _ = find_image_files(root)
    if not files:
        raise CalibrationError(f"{flag} {str(root)!r} holds no image files (searched its subfolders too)")
    if len(files) > limit:  # evenly spread, the first and the last included
        files = [files[round(i * (len(files) - 1) / (limit - 1))] for i in range(limit)]
    transform = eval_transform(model)
    images = []
    for path in files:
        try:
            images.append(decode_image(path, transform, rgb=False))
        except UnreadableImageError as exc:
            raise CalibrationError(f"{flag}: cannot read image {path!r}: {exc}") from None
    return torch.stack(images).float()
