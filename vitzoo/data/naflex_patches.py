"""NaFlex's images to patches: each image resized at its own aspect ratio to as many whole patches
as fit a budget (`NaFlexResize`), then scaled, normalised and cut into the patch-sequence batch
(`assemble`). Evaluation (`vitzoo.naflex.preprocess`, vitzoo/naflex.py) and training
(vitzoo/data/naflex_train.py, which crops first) share these, so that they differ only in the crop.

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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torchvision.transforms.v2 import functional as TF

from ..checks import MAX_TOKENS
from ..errors import VitzooError
from ..layers.helpers import to_2tuple
from ..layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES
from ..memory import require_memory
from ..pretrained_cfg import pretrained_cfg_of
from .transforms import InputSpec, ReadAs8Bit, eval_finish

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
