"""Calibration images for int8: checked once, then split into the images that calibrate a quantized
candidate and the images held out from calibration, on which the guard (guard.py) compares its
answers with the float model's.

Every HELD_OUT_EVERY-th image is held out (images 3, 7, 11, ... for 4), so that both parts sample
the whole set whatever its order (a folder sorted by class). At least MIN_HELD_OUT images are held
out: with fewer, one disagreement would swing the agreement by more than the bound.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import torch

from .report import OptimizeError

HELD_OUT_EVERY = 4
MIN_HELD_OUT = 4
MIN_IMAGES = HELD_OUT_EVERY * MIN_HELD_OUT
# NNCF's default subset: past it, calibration costs time and moves no statistic that matters.
MAX_CALIBRATION = 300


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The images that calibrate (`images`) and the held-out ones (`held_out`, with their `labels`
    where the caller gave labels); `digest` names the set for the choice cache."""

    images: torch.Tensor
    held_out: torch.Tensor
    labels: torch.Tensor | None
    digest: str

    def batches(self, size: int) -> list[torch.Tensor]:
        """The calibration images in batches of `size` (the last one smaller)."""
        return list(self.images.split(size))

    def check_rows(self, batch: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The held-out images (and labels) repeated to fill whole batches of `batch` rows, every row
        a real image: a quantized model is checked at the batch it will run, in every row of it
        (OpenVINO's int8 kernels have been seen to answer wrongly past row 64 of a large batch only,
        which zero padding would hide)."""
        n = self.held_out.shape[0]
        rows = -(-max(n, batch) // batch) * batch
        order = torch.arange(rows) % n
        return self.held_out[order], None if self.labels is None else self.labels[order]


def split_calibration(
    images: torch.Tensor | Sequence[torch.Tensor], example: torch.Tensor, labels: torch.Tensor | None = None
) -> Calibration:
    """`images` (N, C, H, W, preprocessed as the model's inputs; or a list of such batches) checked
    against the example batch and split; OptimizeError naming the argument where they cannot serve."""
    batch = _as_batch(images)
    if tuple(batch.shape[1:]) != tuple(example.shape[1:]):
        raise OptimizeError(
            f"calibration images have shape {tuple(batch.shape[1:])} each; expected the example input's "
            f"{tuple(example.shape[1:])} (preprocessed as the model's inputs)"
        )
    if batch.shape[0] < MIN_IMAGES:
        raise OptimizeError(
            f"calibration holds {batch.shape[0]} images; expected at least {MIN_IMAGES} (every "
            f"{HELD_OUT_EVERY}th is held out to check the answers, at least {MIN_HELD_OUT} of them)"
        )
    if not torch.isfinite(batch).all():
        raise OptimizeError("calibration images hold NaN or infinite values; expected finite pixels")
    held = torch.arange(batch.shape[0]) % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
    batch = batch.to(device=example.device, dtype=example.dtype)
    held_labels = _checked_labels(labels, batch.shape[0])
    return Calibration(
        images=batch[~held][:MAX_CALIBRATION],
        held_out=batch[held],
        labels=held_labels[held] if held_labels is not None else None,
        digest=_digest(batch, held_labels),
    )


def _as_batch(images: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    if isinstance(images, (list, tuple)) and images and all(isinstance(t, torch.Tensor) for t in images):
        if len({tuple(t.shape[1:]) for t in images}) != 1 or any(t.ndim != 4 for t in images):
            raise OptimizeError("calibration batches differ in shape; expected (B, C, H, W) batches of one image size")
        images = torch.cat(list(images))
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or not images.is_floating_point():
        what = (
            f"a {images.dtype} tensor of shape {tuple(images.shape)}"
            if isinstance(images, torch.Tensor)
            else (f"a {type(images).__name__}")
        )
        raise OptimizeError(f"calibration must be a float image batch (N, C, H, W) or a list of them, got {what}")
    return images.detach()


def _checked_labels(labels: torch.Tensor | None, count: int) -> torch.Tensor | None:
    if labels is None:
        return None
    if not isinstance(labels, torch.Tensor) or labels.ndim != 1 or labels.is_floating_point():
        raise OptimizeError("labels must be a 1-d integer tensor, one class index per calibration image")
    if labels.shape[0] != count:
        raise OptimizeError(f"labels holds {labels.shape[0]} class indices for {count} calibration images")
    return labels.cpu()


def _digest(images: torch.Tensor, labels: torch.Tensor | None) -> str:
    """A short fingerprint of the set (its bytes, shape and labels): a choice is remembered per set."""
    h = hashlib.sha256(str(tuple(images.shape)).encode())
    h.update(images.detach().float().cpu().contiguous().numpy().tobytes())
    if labels is not None:
        h.update(labels.numpy().tobytes())
    return h.hexdigest()[:16]
