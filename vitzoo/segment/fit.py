"""Training the head on the frozen backbone's features: cross-entropy over the labelled pixels
(the ignored label left out), AdamW with vitzoo.train's parameter groups (no weight decay on the
BatchNorm and the bias), a linear warmup then a cosine decay per step, and the gradient norm
clipped as DINOv3 clips it.

The batches come either from the cached windows (`cache.cache_batches`) or, with augmentation,
from `augmented_batches`: random scale-jittered, flipped crops read by a DataLoader and passed
through the backbone a batch at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from ..data.masks import IGNORE_INDEX, SegData
from ..train.optim import WarmupCosine, make_optimizer, param_groups
from .backbone import FrozenBackbone
from .crops import Geometry, normalised, padded, random_crop
from .head import LinearHead, upsampled

GRADIENT_CLIP = 35.0  # DINOv3's segmentation recipe
Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


class AugmentedCrops(Dataset):
    """A random crop of training image i (`crops.random_crop`), normalised and padded to `crop`."""

    def __init__(self, data: SegData, geometry: Geometry, backbone: FrozenBackbone, scale: tuple[float, float]) -> None:
        self.data, self.geometry, self.spec, self.scale = data, geometry, backbone.spec, scale

    def __len__(self) -> int:
        return len(self.data.train)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = self.geometry.resized(*self.data.read_pair(self.data.train[index]))
        assert mask is not None
        image, mask = random_crop(self.geometry, image, mask, self.scale)
        return padded(normalised(image, self.spec), mask, self.geometry.crop)


def augmented_batches(
    backbone: FrozenBackbone,
    data: SegData,
    geometry: Geometry,
    *,
    scale: tuple[float, float],
    batch_size: int,
    workers: int,
    generator: torch.Generator,
) -> Batches:
    """Endless batches of (features, masks) of random crops, every image once an epoch."""
    dataset = AugmentedCrops(data, geometry, backbone, scale)
    loader = DataLoader(
        dataset,
        batch_size=min(batch_size, len(dataset)),
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        generator=generator,
        persistent_workers=workers > 0,
    )
    while True:
        for x, masks in loader:
            yield backbone(x), masks.long()


def train_head(
    head: LinearHead,
    batches: Batches,
    *,
    steps: int,
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    device: torch.device,
    progress: bool = True,
    on_step: Callable[[], object] | None = None,
) -> list[float]:
    """Train `head` for `steps` batches (`on_step` called after each); returns the losses."""
    head.to(device).train()
    optimizer = make_optimizer(param_groups(head, weight_decay=weight_decay), lr=lr, device=device)
    schedule = WarmupCosine(optimizer, peak_lr=lr, warmup_steps=warmup_steps, total_steps=steps)
    losses: list[float] = []
    bar = tqdm(range(steps), desc="training the head", unit="step", disable=not progress)
    for _ in bar:
        if on_step is not None:
            on_step()
        features, masks = next(batches)
        features, masks = features.to(device), masks.to(device)
        if not bool((masks != IGNORE_INDEX).any()):  # nothing labelled: no loss to learn from
            schedule.step()
            continue
        logits = upsampled(head(features), tuple(masks.shape[-2:]))
        loss = F.cross_entropy(logits, masks, ignore_index=IGNORE_INDEX)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), GRADIENT_CLIP)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if len(losses) % 20 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    return losses
