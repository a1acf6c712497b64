"""`ImageTensors`: a whole split decoded once into memory.

Small datasets are decoded a single time into one uint8 tensor (N, C, H, W) plus int64 labels.
Every epoch then only indexes that tensor and augments whole batches at once
(vitzoo/data/augment.py), so two CPU cores spend their time in the model instead of in
per-image decoding and PIL transforms. uint8 keeps the memory at one byte per pixel
(the 60,000 Fashion-MNIST images take 47 MB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from .files import ImageFiles

# What the images are, which picks the augmentation (vitzoo/data/augment.py): "digits" (28x28
# grayscale-like) or "natural" (photos).
DataKind = Literal["digits", "natural"]


@dataclass(frozen=True)
class ImageTensors:
    images: torch.Tensor  # uint8 (N, C, H, W)
    labels: torch.Tensor  # int64 (N,)
    classes: tuple[str, ...]  # class index -> name
    source: str  # where it came from, for messages and run records

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise ValueError(
                f"{self.source}: images must be a uint8 tensor (N, C, H, W), got {self.images.dtype} {tuple(self.images.shape)}"
            )
        if self.labels.ndim != 1 or len(self.labels) != len(self.images):
            raise ValueError(
                f"{self.source}: {len(self.images)} images but labels of shape {tuple(self.labels.shape)}; expected ({len(self.images)},)"
            )
        if len(self.images) and (int(self.labels.min()) < 0 or int(self.labels.max()) >= len(self.classes)):
            raise ValueError(
                f"{self.source}: labels range over [{int(self.labels.min())}, {int(self.labels.max())}], "
                f"expected [0, {len(self.classes) - 1}] for {len(self.classes)} classes"
            )

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def channels(self) -> int:
        return self.images.shape[1]

    @property
    def image_size(self) -> tuple[int, int]:
        return (self.images.shape[2], self.images.shape[3])

    def subset(self, index: torch.Tensor, source: str | None = None) -> ImageTensors:
        return ImageTensors(self.images[index], self.labels[index], self.classes, source or self.source)

    def class_counts(self) -> list[int]:
        return torch.bincount(self.labels, minlength=self.num_classes).tolist()


@dataclass(frozen=True)
class DataSplits:
    """The train and evaluation splits of one dataset: decoded into memory (`ImageTensors`) or, for
    a folder too large for that, listed files decoded a batch at a time (`ImageFiles`)."""

    train: ImageTensors | ImageFiles
    val: ImageTensors | ImageFiles
    name: str  # "mnist-sample", "mnist", "fashion-mnist" or "folder"
    kind: DataKind  # "digits" (28x28 grayscale-like) or "natural" (photos): picks the augmentation
    note: str | None = None  # how the data came to be loaded the way it is, for the user (e.g. streamed: too large)

    @property
    def classes(self) -> tuple[str, ...]:
        return self.train.classes

    @property
    def streamed(self) -> bool:
        """Whether the images are decoded from disk a batch at a time (vitzoo/data/stream.py)."""
        return isinstance(self.train, ImageFiles)
