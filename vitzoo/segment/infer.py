"""Evaluation of the probe: the head's prediction for every validation image, the confusion matrix.

An image is resized as for training (`Geometry.resized`), then either cut into the training
windows (`slide`, the default: `crop` squares `stride` apart, as DINOv3 and mmseg evaluate; every
window sees the size the head was trained at) or passed whole (`whole`: one forward pass at the
image's size, the position table resampled to it). The windows' logits are upsampled to their
pixels and averaged where windows overlap; the image's logits are then resized bilinearly to the
mask's own size and the prediction is their argmax, so the metrics are at the dataset's resolution.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..data.masks import SegData, SegSample
from .backbone import FrozenBackbone
from .crops import Geometry, normalised, windows
from .head import LinearHead, upsampled

EVAL_MODES = ("slide", "whole")


@torch.inference_mode()
def image_logits(
    backbone: FrozenBackbone, head: LinearHead, x: torch.Tensor, geometry: Geometry, mode: str, batch_size: int
) -> torch.Tensor:
    """(K, H, W) logits of the normalised image `x` (C, H, W), by `mode` (module docstring)."""
    height, width = x.shape[-2:]
    tiles = [(0, 0, height, width)] if mode == "whole" else windows(height, width, geometry.crop, geometry.stride)
    sums = torch.zeros((head.conv.out_channels, height, width))
    counts = torch.zeros((height, width))
    for start in range(0, len(tiles), batch_size):
        chunk = tiles[start : start + batch_size]
        _, _, h, w = chunk[0]  # the windows of one image share a size
        batch = torch.stack([x[:, top : top + h, left : left + w] for top, left, _, _ in chunk])
        logits = upsampled(head(backbone(batch)), (h, w)).float().cpu()
        for (top, left, _, _), tile in zip(chunk, logits):
            sums[:, top : top + h, left : left + w] += tile
            counts[top : top + h, left : left + w] += 1
    return sums / counts


def predict(
    backbone: FrozenBackbone,
    head: LinearHead,
    data: SegData,
    sample: SegSample,
    geometry: Geometry,
    *,
    mode: str = "slide",
    batch_size: int = 16,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(prediction (H, W) uint8 class indices, the image uint8 (3, H, W), its mask) of one sample,
    at the mask's own size."""
    image, mask = data.read_pair(sample)
    resized, _ = geometry.resized(image)
    logits = image_logits(backbone, head, normalised(resized, backbone.spec), geometry, mode, batch_size)
    logits = upsampled(logits[None], tuple(mask.shape))[0]
    return logits.argmax(0).to(torch.uint8), image, mask


def predictions(
    backbone: FrozenBackbone, head: LinearHead, data: SegData, geometry: Geometry, *, mode: str, batch_size: int
) -> Iterator[tuple[SegSample, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(sample, prediction, image, mask) of every validation image, the head in eval mode."""
    head.eval()
    for sample in data.val:
        yield (sample, *predict(backbone, head, data, sample, geometry, mode=mode, batch_size=batch_size))
