"""NaFlex preprocessing: each image at its own aspect ratio, as many patches as fit a budget.

    batch = vitzoo.naflex.preprocess(model, [PIL.Image.open("wide.jpg"), PIL.Image.open("tall.png")])
    logits = model(batch)           # a model that takes patch sequences (vitzoo/layers/naflex.py)

This module is NaFlex for a model: its images as one batch (`preprocess`), a split as evaluation
batches (`NaFlexLoader`), the check that a model takes patch sequences (`check_model`) and a
batch moved to a device (`batch_to`). The resize to a budget, its two rules (SigLIP 2's and timm's),
the batch's keys and every refusal of an input or budget are vitzoo/data/naflex_patches.py's,
shared with training; their names are handed on here, where users find them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .data import ImageFiles
from .data.naflex_patches import (
    DEFAULT_MAX_PATCHES,
    MAX_PATCHES,
    NaFlexError,
    NaFlexResize,
    NaFlexSpec,
    assemble,
    size_for_budget,
)
from .data.stream import StreamLoader, default_workers

__all__ = [
    "DEFAULT_MAX_PATCHES",
    "MAX_PATCHES",
    "NaFlexError",
    "NaFlexLoader",
    "NaFlexResize",
    "NaFlexSpec",
    "assemble",
    "batch_to",
    "check_model",
    "naflex_settings",
    "preprocess",
    "size_for_budget",
]


def preprocess(
    model: nn.Module, images: Sequence[Any], max_patches: int | None = None, *, pad_to_budget: bool = False
) -> dict[str, Any]:
    """PIL images (any mode) or uint8 tensors (C, H, W) -> the NaFlex batch for `model` (see
    vitzoo/data/naflex_patches.py); `max_patches` None: the weights' budget, else DEFAULT_MAX_PATCHES."""
    if isinstance(images, (torch.Tensor, str)) or not isinstance(images, Sequence):
        raise NaFlexError(f"images must be a list of PIL images or uint8 tensors, got {type(images).__name__}")
    if len(images) == 0:
        raise NaFlexError("images is empty; expected at least one image")
    spec = NaFlexSpec.from_model(model, max_patches)
    resize = NaFlexResize(spec)
    resized = []
    for i, img in enumerate(images):
        try:
            resized.append(resize(img))
        except ValueError as err:  # a NaFlexError too: which of the images, and its mode
            mode = f" (PIL mode {img.mode!r})" if isinstance(getattr(img, "mode", None), str) else ""
            raise NaFlexError(f"images[{i}]{mode}: {err}") from err
    return assemble(resized, spec, pad_to_budget=pad_to_budget)


def check_model(model: nn.Module) -> None:
    """Refuse, as one NaFlexError, a model that cannot take patch sequences (a model of another
    library, a convolutional stem), before any image is read. A check of the model's build only: it
    runs nothing (a forward here would be a collective under FSDP and leave inference tensors)."""
    target = getattr(model, "module", model)  # DDP's wrapper
    target = getattr(target, "visual", target)  # an image-text model or zero-shot classifier: its image tower
    refusal = getattr(target, "patch_sequence_refusal", None)
    if not callable(refusal):
        raise NaFlexError(
            f"{type(model).__name__} cannot take patch sequences (NaFlex): only vitzoo's VisionTransformer does"
        )
    reason = refusal()
    if reason is not None:
        raise NaFlexError(f"{type(model).__name__} cannot take patch sequences (NaFlex): {reason}")


def naflex_settings(spec: NaFlexSpec) -> dict[str, Any]:
    """The spec as plain data, for run records and resume keys."""
    return {
        "naflex": {
            **dataclasses.asdict(spec.input),
            "patch": list(spec.patch),
            "max_patches": spec.max_patches,
            "rule": spec.rule,
        }
    }


def batch_to(x: Any, device: torch.device | str, dtype: torch.dtype | None = None) -> Any:
    """An image batch (tensor) or a NaFlex batch (dict) on `device`, its floating tensors in
    `dtype` where given (the patches; coordinates and masks keep theirs)."""

    def move(t: torch.Tensor) -> torch.Tensor:
        return t.to(device, dtype if dtype is not None and t.is_floating_point() else t.dtype, non_blocking=True)

    return {key: move(t) for key, t in x.items()} if isinstance(x, Mapping) else move(x)


class _Prepare:
    """NaFlexResize in the (image, seed) form of vitzoo.data.stream's workers (evaluation: no seed)."""

    def __init__(self, resize: NaFlexResize) -> None:
        self.resize = resize

    def __call__(self, img: Any, seed: int) -> torch.Tensor:
        return self.resize(img)


class NaFlexLoader:
    """Evaluation batches of a split as NaFlex batches, in order: `iterate_indexed` yields (step,
    image indices, batch, labels) as vitzoo.data's loaders do. Listed files are decoded and resized
    by `workers` processes (vitzoo.data.stream, unreadable ones left out; None: its default), images in memory (uint8
    (N, C, H, W), e.g. MNIST) resized here; `assemble` finishes each batch, so a batch equals
    `preprocess` of its images."""

    def __init__(self, data: Any, spec: NaFlexSpec, *, batch_size: int, workers: int | None = 0) -> None:
        self.data, self.spec, self.batch_size = data, spec, batch_size
        self.resize = NaFlexResize(spec)
        self.stream: StreamLoader | None = None
        if isinstance(data, ImageFiles):
            self.stream = StreamLoader(
                data,
                batch_size=batch_size,
                prepare=_Prepare(self.resize),
                finish=lambda images, _: assemble(images, spec),
                shuffle=False,
                workers=default_workers() if workers is None else workers,
                stack=False,
            )
        elif batch_size < 1 or len(data) == 0:
            raise ValueError(f"batch_size={batch_size} with {len(data)} images; expected >= 1 of each")

    def __len__(self) -> int:
        return -(-len(self.data) // self.batch_size)

    def iterate_indexed(
        self, epoch: int = 0, start_step: int = 0
    ) -> Iterator[tuple[int, torch.Tensor, Any, torch.Tensor]]:
        if self.stream is not None:
            yield from self.stream.iterate_indexed(epoch, start_step)
            return
        for step in range(start_step, len(self)):
            index = torch.arange(step * self.batch_size, min(len(self.data), (step + 1) * self.batch_size))
            images = [self.resize(img) for img in self.data.images[index]]
            yield step, index, assemble(images, self.spec), self.data.labels[index]

    def iterate(self, epoch: int = 0, start_step: int = 0) -> Iterator[tuple[Any, torch.Tensor]]:
        for _, _, x, y in self.iterate_indexed(epoch, start_step):
            yield x, y
