"""NaFlex preprocessing: each image at its own aspect ratio, as many patches as fit a budget.

    batch = vitzoo.naflex.preprocess(model, [PIL.Image.open("wide.jpg"), PIL.Image.open("tall.png")])
    logits = model(batch)           # a model that takes patch sequences (vitzoo/layers/naflex.py)

Each image is resized, keeping its aspect ratio, to the largest size whose sides are whole patches
and whose patch count is at most `max_patches` (`size_for_budget`: the search of transformers'
`get_image_size_for_max_num_patches` and timm's `get_image_size_for_seq`, which agree), with the
weights' interpolation (antialiased), scaled to [0, 1], brought to the model's channels,
normalised with the weights' mean / std and cut into patches, each patch's pixels in (row,
column, channel) order. The batch (timm's keys, transformers' `spatial_shapes` added):

    patches         (B, L, ph * pw * C) float32, padding rows zero
    patch_coord     (B, L, 2) int64 (row, column) of each patch in its image's grid, padding (0, 0)
    patch_valid     (B, L) bool, False for padding
    spatial_shapes  (B, 2) int64 (rows, columns) of each image's grid

L is the longest sequence of the batch (`pad_to_budget=True`: `max_patches`, as timm's NaFlex
collator and transformers' processor pad). The model masks the padding, so its outputs do not
depend on L; the shortest L is the least work.

Two resize rules, from the model's config (`pos_resample`, the position rule of its weights):

* "siglip2" (SigLIP 2 NaFlex): transformers' `Siglip2ImageProcessor` (its torchvision backend, the
  default in transformers 5): a PIL image becomes a uint8 tensor first and torchvision resizes the
  tensor;
* otherwise timm's NaFlex evaluation transform (`ResizeToSequence` then `Patchify`): a PIL image
  is resized by PIL (as timm's loaders read images), a tensor by torchvision.

A uint8 tensor (C, H, W) is resized by torchvision under both rules. PIL images of any mode are
read as `vitzoo.data.eval_transform` reads them (16-bit scaled, alpha dropped, grayscale kept for
a one-channel model); a tensor's fourth (alpha) channel is dropped, a second one (gray + alpha)
likewise.

Budgets and inputs (each refusal a `NaFlexError` naming the argument or the image):

* `max_patches` None: the weights' trained budget (`pretrained_cfg.max_patches`), else timm's
  default DEFAULT_MAX_PATCHES; otherwise an int in [1, MAX_PATCHES] (MAX_PATCHES is the bound of
  any patch grid in vitzoo, `checks.MAX_TOKENS`), and a batch must fit the memory this process
  may allocate (`vitzoo.memory`);
* an image smaller than one patch is enlarged as both references enlarge it (at least one patch
  per side, the scale at most 100: a 1 x 1 image becomes 7 x 7 patches of 16);
* an extreme aspect ratio clamps: the short side becomes one patch and the long side as many
  patches as the budget leaves (a 1 x 100000 image at 256 patches of 16 becomes 16 x 4096 pixels).
  No tensor is sized by the raw side beyond the resize's own pass (at most PIL's decompression-bomb
  limit of pixels, else refused);
* an empty list, an image without pixels, a tensor that is not uint8 (C, H, W) are refused.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torchvision.transforms.v2 import functional as TF

from .checks import MAX_TOKENS
from .data.transforms import InputSpec, ReadAs8Bit, eval_finish
from .errors import VitzooError
from .layers.helpers import to_2tuple
from .layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES
from .memory import require_memory
from .pretrained_cfg import pretrained_cfg_of

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

SPATIAL_SHAPES = "spatial_shapes"  # transformers' name; the model ignores it
DEFAULT_MAX_PATCHES = 576  # timm's NaFlex default (max_seq_len: 24 x 24 patches of 16)
MAX_PATCHES = MAX_TOKENS
RULES = ("siglip2", "timm")
# The search of both references: the scale in [_EPS / 10, 100), halved until narrower than _EPS.
_EPS = 1e-5
_MAX_SCALE = 100.0


class NaFlexError(VitzooError, ValueError):
    """An input or budget NaFlex preprocessing cannot take; the message names it."""


def check_max_patches(value: Any, what: str = "max_patches") -> int:
    """`value` as a budget: an int in [1, MAX_PATCHES], else NaFlexError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PATCHES:
        raise NaFlexError(f"{what}={value!r} is invalid; expected an int in [1, {MAX_PATCHES}] (patches per image)")
    return value


def size_for_budget(height: int, width: int, patch: tuple[int, int], max_patches: int) -> tuple[int, int]:
    """(H, W) for an image of (height, width): the aspect ratio kept, each side a whole number of
    patches (at least one), at most `max_patches` patches; the largest scale found by bisection on
    [1e-6, 100) to within 1e-5, as transformers and timm search it."""
    ph, pw = patch

    def sides(scale: float) -> tuple[int, int]:
        return max(ph, math.ceil(height * scale / ph) * ph), max(pw, math.ceil(width * scale / pw) * pw)

    low, high = _EPS / 10, _MAX_SCALE
    while high - low >= _EPS:
        middle = (low + high) / 2
        rows_px, cols_px = sides(middle)
        if (rows_px // ph) * (cols_px // pw) <= max_patches:
            low = middle
        else:
            high = middle
    if low <= _EPS:
        raise NaFlexError(
            f"a {width}x{height} image cannot be scaled into {max_patches} patches of {pw}x{ph} "
            "(it would shrink more than 100000 times); expected a smaller image or a larger max_patches"
        )
    return sides(low)


@dataclass(frozen=True)
class NaFlexSpec:
    """What NaFlex preprocessing needs of a model: its input spec (channels, mean, std,
    interpolation), patch size, budget and resize rule (one of RULES)."""

    input: InputSpec
    patch: tuple[int, int]
    max_patches: int
    rule: str = "timm"

    @classmethod
    def from_model(cls, model: nn.Module, max_patches: int | None = None) -> NaFlexSpec:
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "patch_size"):
            raise NaFlexError(f"{type(model).__name__} has no ViT config (patch_size); NaFlex needs a vitzoo ViT")
        if max_patches is None:
            cfg = pretrained_cfg_of(model)
            max_patches = (cfg.max_patches if cfg is not None else None) or DEFAULT_MAX_PATCHES
        rule = "siglip2" if getattr(config, "pos_resample", None) == "siglip2" else "timm"
        patch = to_2tuple(config.patch_size, "patch_size")
        return cls(InputSpec.from_model(model), patch, check_max_patches(max_patches), rule)


class NaFlexResize:
    """One image (PIL, any mode, or uint8 tensor (C, H, W)) -> uint8 (C, H, W) resized to its
    budget (`size_for_budget`) by the spec's rule. A class, so DataLoader workers can receive it."""

    def __init__(self, spec: NaFlexSpec) -> None:
        self.spec = spec
        self.read = ReadAs8Bit(spec.input.channels)

    def __call__(self, img: Any) -> torch.Tensor:
        spec = self.spec
        interpolation = TF.InterpolationMode(spec.input.interpolation)
        if isinstance(img, torch.Tensor):
            img = _checked_tensor(img)
        elif hasattr(img, "convert"):
            img = self.read(img)
            if spec.rule == "siglip2":  # transformers: the pixels as a tensor, resized by torchvision
                img = TF.pil_to_tensor(img)
        else:
            raise NaFlexError(f"expected a PIL image or a uint8 tensor (C, H, W), got {type(img).__name__}")
        height, width = TF.get_size(img)
        if height < 1 or width < 1:
            raise NaFlexError(f"image of {width}x{height} pixels has no pixels; expected both sides >= 1")
        target = size_for_budget(height, width, spec.patch, spec.max_patches)
        _check_pass(height, width, target)
        out = TF.resize(img, list(target), interpolation=interpolation, antialias=True)
        return out if isinstance(out, torch.Tensor) else TF.pil_to_tensor(out)


def _checked_tensor(img: torch.Tensor) -> torch.Tensor:
    if img.dtype != torch.uint8 or img.dim() != 3 or img.shape[0] not in (1, 2, 3, 4):
        raise NaFlexError(
            f"image tensor {img.dtype} {tuple(img.shape)} is invalid; expected uint8 (C, H, W) with C 1-4 "
            "(gray, gray + alpha, RGB, RGBA)"
        )
    return img[:1] if img.shape[0] == 2 else img[:3]  # alpha dropped, as PIL's convert() drops it


def _check_pass(height: int, width: int, target: tuple[int, int]) -> None:
    """Refuse a resize whose one-axis pass would exceed PIL's decompression-bomb limit (an extreme
    aspect ratio enlarged on its short side): the pass is the only tensor sized by a raw side."""
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS  # None when the user switched PIL's guard off
    largest = max(height * target[1], target[0] * width)
    if limit is not None and largest > limit:
        raise NaFlexError(
            f"resizing this {width}x{height} image to {target[1]}x{target[0]} would pass through {largest} pixels, "
            f"more than PIL's decompression-bomb limit of {limit} (PIL.Image.MAX_IMAGE_PIXELS); expected a less "
            "elongated image"
        )


def assemble(images: Sequence[torch.Tensor], spec: NaFlexSpec, *, pad_to_budget: bool = False) -> dict[str, Any]:
    """Resized uint8 images (C, H, W), sides whole patches (`NaFlexResize`) -> the batch of the
    module docstring: scaled, the model's channels, normalised, cut into patches, padded."""
    if not images:
        raise NaFlexError("images is empty; expected at least one image")
    ph, pw = spec.patch
    grids = [(int(img.shape[-2]) // ph, int(img.shape[-1]) // pw) for img in images]
    length = spec.max_patches if pad_to_budget else max(r * c for r, c in grids)
    width = ph * pw * spec.input.channels
    require_memory(
        len(images) * length * (width * 4 + 2 * 8 + 1),
        f"a NaFlex batch of {len(images)} images x {length} patches of {width} values",
        "use a smaller batch size or --max-patches",
    )
    patches = torch.zeros(len(images), length, width)
    coord = torch.zeros(len(images), length, 2, dtype=torch.int64)
    valid = torch.zeros(len(images), length, dtype=torch.bool)
    finish = eval_finish(spec.input)
    for i, (img, (rows, cols)) in enumerate(zip(images, grids)):
        x = finish(img).as_subclass(torch.Tensor)  # (C, H, W) float32, normalised
        n = rows * cols
        patches[i, :n] = x.reshape(-1, rows, ph, cols, pw).permute(1, 3, 2, 4, 0).reshape(n, width)
        coord[i, :n, 0] = torch.arange(rows).repeat_interleave(cols)
        coord[i, :n, 1] = torch.arange(cols).repeat(rows)
        valid[i, :n] = True
    shapes = torch.tensor(grids, dtype=torch.int64).view(-1, 2)
    return {PATCHES: patches, PATCH_COORD: coord, PATCH_VALID: valid, SPATIAL_SHAPES: shapes}


def preprocess(
    model: nn.Module, images: Sequence[Any], max_patches: int | None = None, *, pad_to_budget: bool = False
) -> dict[str, Any]:
    """PIL images (any mode) or uint8 tensors (C, H, W) -> the NaFlex batch for `model` (see the
    module docstring); `max_patches` None: the weights' budget, else DEFAULT_MAX_PATCHES."""
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
        from .data import ImageFiles
        from .data.stream import StreamLoader, default_workers

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
