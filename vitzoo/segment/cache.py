"""The training set of the probe without augmentation: each training image's windows, their
features computed once and kept compactly (bfloat16 maps, uint8 masks) in RUN/train_features.safetensors.

A second run in the same folder with the same backbone (its weights' values), layers, geometry
and training images reads the file instead of running the backbone again: only the head trains.
The features are held in memory; a set over `MAX_CACHE_BYTES` is refused with the way out
(augmentation computes them batch by batch, or a smaller size).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..atomic import write_safetensors
from ..data.masks import MaskDataError, SegData, SegSample
from ..data.transforms import InputSpec
from .backbone import FrozenBackbone
from .crops import Geometry, normalised, padded, windows

CACHE_FILE = "train_features.safetensors"
MAX_CACHE_BYTES = 4 * 1024**3
_METADATA = "vitzoo.segment_cache"


@dataclass(frozen=True)
class CachedCrops:
    """The training windows: features (N, D, h, w) bfloat16, masks (N, crop, crop) uint8."""

    features: torch.Tensor
    masks: torch.Tensor

    def __len__(self) -> int:
        return len(self.masks)


def image_windows(
    data: SegData, sample: SegSample, geometry: Geometry, spec: InputSpec
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(normalised window (C, crop, crop), its mask) of one training image, padded to `crop` where
    the image is smaller."""
    image, mask = geometry.resized(*data.read_pair(sample))
    assert mask is not None
    x = normalised(image, spec)
    for top, left, h, w in windows(x.shape[-2], x.shape[-1], geometry.crop, geometry.stride):
        yield padded(x[:, top : top + h, left : left + w], mask[top : top + h, left : left + w], geometry.crop)


def extract_crops(
    backbone: FrozenBackbone,
    data: SegData,
    geometry: Geometry,
    *,
    batch_size: int,
    progress: bool = True,
    budget: int = MAX_CACHE_BYTES,
    on_step: Callable[[], object] | None = None,
) -> CachedCrops:
    """The features of every training window (`image_windows`), `batch_size` windows a pass;
    `on_step` is called before each image."""
    features: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    held = 0
    pending: list[tuple[torch.Tensor, torch.Tensor]] = []

    def flush() -> None:
        nonlocal held
        maps = backbone(torch.stack([x for x, _ in pending])).to(torch.bfloat16).cpu()
        features.append(maps)
        masks.append(torch.stack([m for _, m in pending]))
        held += maps.numel() * maps.element_size() + masks[-1].numel()
        pending.clear()
        if held > budget:
            raise MaskDataError(
                f"{data.source}: the cached training features pass {budget / 1024**3:.1f} GiB; train with "
                "augmentation (--augment: features computed a batch at a time) or a smaller --size or --crop"
            )

    for sample in tqdm(data.train, desc="features", unit="img", disable=not progress):
        if on_step is not None:
            on_step()
        for window in image_windows(data, sample, geometry, backbone.spec):
            pending.append(window)
            if len(pending) == batch_size:
                flush()
    if pending:
        flush()
    return CachedCrops(torch.cat(features), torch.cat(masks))


def load_cached(path: Path, key: dict[str, Any]) -> CachedCrops | None:
    """The crops in `path` when it was written for `key`, else None (a stale or unreadable file is
    computed again)."""
    from safetensors import safe_open

    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            if json.loads((f.metadata() or {}).get(_METADATA, "null")) != json.loads(json.dumps(key)):
                return None
            return CachedCrops(f.get_tensor("features"), f.get_tensor("masks"))
    except Exception as err:  # a damaged file: safetensors and json raise several types
        warnings.warn(f"{path}: cannot reuse the cached features ({err}); computing them again", stacklevel=2)
        return None


def save_cached(path: Path, key: dict[str, Any], crops: CachedCrops) -> None:
    write_safetensors(path, {"features": crops.features, "masks": crops.masks}, {_METADATA: json.dumps(key)})


def cached_crops(
    out: str | os.PathLike[str],
    key: dict[str, Any],
    backbone: FrozenBackbone,
    data: SegData,
    geometry: Geometry,
    **kw: Any,
) -> CachedCrops:
    """The training crops of RUN `out`: read when cached for `key`, else extracted and cached."""
    path = Path(out) / CACHE_FILE
    crops = load_cached(path, key)
    if crops is None:
        crops = extract_crops(backbone, data, geometry, **kw)
        save_cached(path, key, crops)
    return crops


def cache_batches(
    crops: CachedCrops, batch_size: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless shuffled batches (features float32, masks long), every crop once an epoch."""
    size = min(batch_size, len(crops))
    while True:
        order = torch.randperm(len(crops), generator=generator)
        for start in range(0, len(order) - size + 1, size):
            rows = order[start : start + size]
            yield crops.features[rows].float(), crops.masks[rows].long()
