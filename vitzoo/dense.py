"""Dense features: a backbone's patch tokens as (B, C, rows, columns) maps, at any input size.

    x = vitzoo.load_dense_image(model, "street.jpg", short_side=448)  # (1, 3, H, W), aspect kept
    maps = vitzoo.dense_features(model, x)                              # (1, C, H / p, W / p)
    ms = vitzoo.dense_features(model, x, layers=4, concat=True)         # DINOv2's "+ms": (1, 4C, ...)
    tiled = vitzoo.dense_features(model, x, window=224, stride=112)     # overlapping windows, averaged

`dense_features` is the model's `forward_intermediates(x, indices, norm=norm, output_fmt="NCHW",
intermediates_only=True)`, timm's call with timm's values, on an input of any height and width
that are multiples of the patch: a rotary embedding is computed for the input's grid, a learned
position table resampled to it (bicubic, as `dynamic_img_size` does; a model built for one size
takes other sizes through a view that shares its parameters, the model itself left unchanged).
`window=` instead runs the model on overlapping windows of that size and averages the windows'
maps where they overlap (docs/dense.md compares the two).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .data.folder import UnreadableImageError, decode_image
from .data.transforms import InputSpec, dense_transform
from .errors import VitzooError
from .model import VisionTransformer

Size = int | tuple[int, int]


class DenseInputError(VitzooError, ValueError):
    """An argument of `dense_features` / `load_dense_image` that cannot be used; the message names it."""


def backbone_of(model: nn.Module) -> VisionTransformer:
    """The VisionTransformer whose patch tokens `model` has: the model itself or, for an image-text
    model (CLIP, SigLIP, PE), its image tower `visual`."""
    for candidate in (model, getattr(model, "visual", None)):
        if isinstance(candidate, VisionTransformer):
            return candidate
    raise DenseInputError(
        f"model: {type(model).__name__} has no patch tokens vitzoo can read; expected a vitzoo VisionTransformer "
        "(vitzoo.create(name)) or an image-text model with one as its image tower (vitzoo.create(name, text=True))"
    )


# ----------------------------------------------------------------------------- arguments
def _block_indices(layers: int | Sequence[int], depth: int) -> list[int]:
    """`layers` as absolute block indices in the order asked: an int n = the last n blocks, a list
    = those blocks (negative from the end)."""
    if isinstance(layers, int) and not isinstance(layers, bool):
        if not 0 < layers <= depth:
            raise DenseInputError(f"layers={layers} is invalid; expected the number of last blocks, 1 to {depth}")
        return list(range(depth - layers, depth))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence) or not layers:
        raise DenseInputError(f"layers={layers!r} is invalid; expected an int or a non-empty list of block indices")
    for i in layers:
        if isinstance(i, bool) or not isinstance(i, int) or not -depth <= i < depth:
            raise DenseInputError(
                f"layers={list(layers)!r} is invalid; expected block indices from {-depth} to {depth - 1} "
                f"(this model has {depth} blocks)"
            )
    return [i % depth for i in layers]


def _check_images(model: VisionTransformer, x: Any) -> None:
    """`x` is a (B, in_chans, H, W) float batch whose sides the patch embedding takes."""
    channels = model.config.in_chans
    if not isinstance(x, torch.Tensor) or x.ndim != 4 or x.shape[1] != channels or not x.is_floating_point():
        found = f"shape {tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise DenseInputError(
            f"x has {found}; expected a normalised float batch (B, {channels}, H, W) (load_dense_image gives one)"
        )
    embed = model.patch_embed
    (ph, pw), (h, w) = embed.patch_size, x.shape[-2:]
    if embed.stem is not None:
        return  # a conv stem takes any size, its last cell padded
    if embed.drop_remainder and (h < ph or w < pw):
        raise DenseInputError(f"x is {h}x{w} pixels; expected at least one {ph}x{pw} patch")
    if not embed.drop_remainder and (h % ph or w % pw):
        raise DenseInputError(
            f"x is {h}x{w} pixels; expected a height that is a multiple of {ph} and a width that is a multiple "
            f"of {pw} (the patch; load_dense_image resizes to whole patches)"
        )


def _pair(value: Any, name: str, patch: tuple[int, int]) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v % p for v, p in zip(pair, patch))
    ):
        raise DenseInputError(
            f"{name}={value!r} is invalid; expected a positive int or (height, width) in pixels, multiples of "
            f"the patch {patch}"
        )
    return pair[0], pair[1]


def _windows(
    model: VisionTransformer, x: torch.Tensor, window: Size, stride: Size | None
) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """The top-left corners (in patches) of the windows that tile `x`, `stride` apart along each
    axis (half the window by default) with the last one flush with the image's end; and the size
    of a window in patches."""
    patch = model.patch_embed.patch_size
    if model.patch_embed.stem is not None:
        raise DenseInputError("window: a model with a conv stem pads each window; expected window=None")
    size = _pair(window, "window", patch)
    grid = (x.shape[-2] // patch[0], x.shape[-1] // patch[1])
    cells = (size[0] // patch[0], size[1] // patch[1])
    if cells[0] > grid[0] or cells[1] > grid[1]:
        raise DenseInputError(
            f"window={window!r} is larger than x ({x.shape[-2]}x{x.shape[-1]} pixels); expected a window that fits "
            "the image, or window=None"
        )
    if stride is None:
        steps = (max(1, cells[0] // 2), max(1, cells[1] // 2))
    else:
        pixels = _pair(stride, "stride", patch)
        steps = (pixels[0] // patch[0], pixels[1] // patch[1])
        if steps[0] > cells[0] or steps[1] > cells[1]:
            raise DenseInputError(f"stride={stride!r} is larger than window={window!r}; windows would leave gaps")
    starts = []
    for length, span, step in zip(grid, cells, steps):
        axis = list(range(0, length - span + 1, step))
        starts.append(axis if axis[-1] == length - span else [*axis, length - span])
    return [(top, left) for top in starts[0] for left in starts[1]], cells


# ----------------------------------------------------------------------------- features
def _at_any_size(model: VisionTransformer, image_size: tuple[int, int]) -> VisionTransformer:
    """`model` where it takes `image_size`; else a view of it that takes any size (the positions
    follow the grid, as with `dynamic_img_size`). The view shares every parameter, buffer and
    block with `model`; only its config and its patch embedding's size check are its own, so the
    caller's model is never changed and calls from several threads do not meet."""
    if model.config.dynamic_img_size or image_size == tuple(model.patch_embed.img_size):
        return model
    embed = copy.copy(model.patch_embed)  # a new object over the same parameters
    embed.strict_img_size = False
    view = copy.copy(model)
    view._modules = {**model._modules, "patch_embed": embed}  # the copy's own table of submodules
    view.config = model.config.replace(dynamic_img_size=True)
    return view


def _maps(model: VisionTransformer, x: torch.Tensor, blocks: list[int], norm: bool) -> list[torch.Tensor]:
    """forward_intermediates' (B, C, rows, columns) maps of `blocks` (sorted, distinct)."""
    out = _at_any_size(model, (x.shape[-2], x.shape[-1])).forward_intermediates(
        x, indices=blocks, norm=norm, stop_early=True, output_fmt="NCHW", intermediates_only=True
    )
    return list(out)  # type: ignore[arg-type]  # NCHW intermediates only: a list of tensors


def _window_maps(
    model: VisionTransformer, x: torch.Tensor, blocks: list[int], norm: bool, window: Size, stride: Size | None
) -> list[torch.Tensor]:
    """The maps of every window, each added to its cells of the whole grid, divided by how many
    windows cover each cell."""
    corners, (rows, cols) = _windows(model, x, window, stride)
    ph, pw = model.patch_embed.patch_size
    grid = (x.shape[-2] // ph, x.shape[-1] // pw)
    sums: list[torch.Tensor] = []
    count = torch.zeros(grid, device=x.device)
    for top, left in corners:
        crop = x[..., top * ph : (top + rows) * ph, left * pw : (left + cols) * pw]
        maps = _maps(model, crop, blocks, norm)
        if not sums:
            sums = [m.new_zeros((*m.shape[:2], *grid), dtype=torch.float32) for m in maps]
        for total, m in zip(sums, maps):
            total[..., top : top + rows, left : left + cols] += m.float()
        count[top : top + rows, left : left + cols] += 1
    return [(total / count).to(maps[0].dtype) for total in sums]


def dense_features(
    model: nn.Module,
    x: torch.Tensor,
    layers: int | Sequence[int] = 1,
    norm: bool = True,
    concat: bool = False,
    *,
    window: Size | None = None,
    stride: Size | None = None,
) -> torch.Tensor | list[torch.Tensor]:
    """The patch tokens of `model` for the normalised batch `x` (B, C, H, W) as (B, D, H / p, W / p)
    maps (p the patch; the pixels past the last whole patch are ignored with `drop_remainder`).

    layers: an int n = the last n blocks, a list = those blocks (negative from the end), returned in
        the order given. `layers=1` returns one tensor, anything else a list of tensors.
    norm: pass each block's tokens through the model's final norm (an Identity where it has none).
    concat: one tensor, the maps concatenated along the channels (DINOv2's "+ms": `layers=4`).
    window, stride: run the model on windows of `window` pixels (int or (height, width), multiples
        of the patch; the model's own `config.img_size` keeps a learned table as trained), `stride`
        apart (half the window by default, the last window flush with the border), and average the
        maps where windows overlap. None: one call at the input's size.
    The model is run as it is: call `model.eval()` (and torch.no_grad()) for inference."""
    backbone = backbone_of(model)
    _check_images(backbone, x)
    wanted = _block_indices(layers, len(backbone.blocks))
    blocks = sorted(set(wanted))
    if window is None:
        if stride is not None:
            raise DenseInputError(f"stride={stride!r} needs a window; expected window= with it, or no stride")
        maps = _maps(backbone, x, blocks, norm)
    else:
        maps = _window_maps(backbone, x, blocks, norm, window, stride)
    by_block = dict(zip(blocks, maps))
    out = [by_block[i] for i in wanted]
    if concat:
        return torch.cat(out, dim=1)
    return out[0] if isinstance(layers, int) and layers == 1 else out


def load_dense_image(
    model: nn.Module, image: str | os.PathLike[str] | Any, short_side: int | None = None
) -> torch.Tensor:
    """An image (a path, a PIL image of any mode, or a uint8 (C, H, W) tensor) as the normalised
    (1, C, H, W) float32 batch `dense_features` takes: its aspect ratio kept, the shorter side
    resized to `short_side` (the model's own input size by default) and both sides to the nearest
    multiple of the patch, with the weights' interpolation, mean and std (`pretrained_cfg`)."""
    backbone = backbone_of(model)
    spec = InputSpec.of(backbone)
    side = min(spec.size) if short_side is None else short_side
    if isinstance(side, bool) or not isinstance(side, int) or side <= 0:
        raise DenseInputError(f"short_side={short_side!r} is invalid; expected a positive int (pixels)")
    if not isinstance(image, (str, os.PathLike, torch.Tensor)) and not hasattr(image, "convert"):
        raise DenseInputError(
            f"image: got {type(image).__name__}; expected a path, a PIL image or a uint8 (C, H, W) tensor"
        )
    if isinstance(image, torch.Tensor) and image.ndim != 3:
        raise DenseInputError(f"image has shape {tuple(image.shape)}; expected one image (C, H, W)")
    transform = dense_transform(spec, side, backbone.patch_embed.patch_size)
    if not isinstance(image, (str, os.PathLike)):
        try:
            return transform(image).unsqueeze(0)
        except ValueError as err:  # its channels cannot become the model's, or too many pixels
            raise DenseInputError(f"image: {err}") from err
    try:
        return decode_image(image, transform, rgb=False).unsqueeze(0)
    except (UnreadableImageError, ValueError) as err:
        raise DenseInputError(f"image {os.fspath(image)!r}: {err}") from err
