"""`pca` and `similarity`: what a backbone's patch features say about real photos.

* PCA: DINOv3's pictures, each image beside its map: 3 whitened principal components of the patch
  features, fit on the foreground patches of all images together (so the same parts get the same
  colours in every image), coloured through a sigmoid, the background black (vitzoo/viz/pca.py).
* Similarity: the cosine similarity of one chosen patch of the first image with every patch of
  every image.

The images keep their aspect ratio (`vitzoo.load_dense_image`, shorter side `size`), the features
are `vitzoo.dense_features` of one block. The model runs as it is: `model.eval()` is the caller's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ..data.transforms import InputSpec
from ..dense import backbone_of, dense_features, load_dense_image
from ._figure import finish, new_figure, show_image, to_numpy_image
from .attention_maps import HEAT_CMAP, check_index
from .images import open_image, read_image
from .pca import PictureInputError, check_query, patch_similarity, pca_colours

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Image = str | os.PathLike[str] | torch.Tensor | Any  # a path, a PIL image or a uint8 (C, H, W) tensor
_PANEL_INCHES = 5.0  # the width of each picture; its height follows the image's aspect ratio


@dataclass(frozen=True)
class DenseImage:
    """One image as the pictures use it: its `name`, its pixel size as given (`source_size`,
    height and width), the `block` whose features these are, the `display` image (3, H, W) in [0, 1] the model saw (resized to whole
    patches) and its `features` (C, rows, columns)."""

    name: str
    source_size: tuple[int, int]
    block: int
    display: torch.Tensor
    features: torch.Tensor


def _name(image: Image, index: int) -> str:
    return os.fspath(image) if isinstance(image, (str, os.PathLike)) else f"image {index}"


def _check_images(images: Any) -> None:
    if isinstance(images, (str, os.PathLike)) or not isinstance(images, Sequence) or not images:
        raise PictureInputError(f"images: got {images!r}; expected a non-empty list of images")


def dense_images(
    model: nn.Module, images: Sequence[Image], *, size: int | None = None, layer: int = -1
) -> list[DenseImage]:
    """Each image read, resized (shorter side `size`, default the model's input size; the aspect
    ratio kept) and run through `model`: its display image and the features of block `layer`
    (negative from the end), without gradients."""
    _check_images(images)
    backbone = backbone_of(model)
    depth = len(backbone.blocks)
    layer = check_index(layer, depth, what="layer", context=f"the model has {depth} blocks")
    spec = InputSpec.of(backbone)
    mean, std = (torch.tensor(v).reshape(-1, 1, 1) for v in (spec.mean, spec.std))
    device = next(backbone.parameters()).device
    out = []
    for i, image in enumerate(images):
        picture = open_image(image) if isinstance(image, (str, os.PathLike)) else image
        x = load_dense_image(model, picture, short_side=size)  # checks what the image is
        source = tuple(picture.shape[-2:]) if isinstance(picture, torch.Tensor) else (picture.height, picture.width)
        with torch.no_grad():
            maps = dense_features(model, x.to(device), layers=[layer])
        display = (x[0] * std + mean).clamp(0, 1)
        display = display.expand(3, -1, -1) if display.shape[0] == 1 else display[:3]
        out.append(
            DenseImage(_name(image, i), (int(source[0]), int(source[1])), layer, display, maps[0][0].float().cpu())
        )
    return out


def read_mask(path: str | os.PathLike[str], image: DenseImage) -> torch.Tensor:
    """The foreground of `image` from a mask file (bright = foreground) as a (rows, columns) bool
    map: the share of foreground pixels in each patch over a half. The mask is the image's own
    size (as given, or as resized to whole patches), or one pixel per patch."""
    rows, columns = image.features.shape[1:]
    mask = read_image(path, channels=1)
    shape = tuple(mask.shape[1:])
    sizes = {image.source_size, tuple(image.display.shape[1:]), (rows, columns)}
    if shape not in sizes:
        expected = " or ".join(f"{h}x{w}" for h, w in sorted(sizes))
        raise PictureInputError(
            f"mask '{Path(path)}' is {shape[0]}x{shape[1]} pixels (height x width); expected the size of "
            f"{image.name}: {expected}"
        )
    share = F.interpolate(mask[None], size=(rows, columns), mode="area")[0, 0]
    return share > 0.5


def _figure_rows(items: Sequence[DenseImage], title: str) -> tuple[Figure, Any]:
    """A figure of one row per image, two pictures of `_PANEL_INCHES` each, and its (n, 2) axes."""
    ratios = [item.display.shape[1] / item.display.shape[2] for item in items]
    fig = new_figure(2 * _PANEL_INCHES, _PANEL_INCHES * sum(ratios) + 0.5)
    axes = fig.subplots(len(items), 2, squeeze=False, gridspec_kw={"height_ratios": ratios})
    fig.suptitle(title, fontsize=10)
    return fig, axes


def _grid(picture: torch.Tensor) -> str:
    return f"{picture.shape[-2]} x {picture.shape[-1]} patches"


def _show_map(ax: Any, image: DenseImage, picture: Any, title: str, **style: Any) -> Any:
    """`picture` (rows, columns [, 3]) stretched over `image`'s pixels, one cell per patch."""
    height, width = image.display.shape[1:]
    shown = ax.imshow(picture, interpolation="nearest", extent=(0, width, height, 0), **style)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
    return shown


def plot_pca(
    model: nn.Module,
    images: Sequence[Image],
    *,
    size: int | None = None,
    layer: int = -1,
    masks: Sequence[str | os.PathLike[str]] | None = None,
    out: str | os.PathLike[str] | None = None,
    dpi: int = 100,
) -> Figure:
    """Each image beside its PCA map (module doc): one shared fit on the foreground of all images,
    DINOv2's first-component foreground or `masks` (one file per image, see `read_mask`). 10
    inches wide; writes a PNG when `out` is given."""
    _check_images(images)
    if masks is not None and (isinstance(masks, (str, os.PathLike)) or len(masks) != len(images)):
        count = 1 if isinstance(masks, (str, os.PathLike)) else len(masks)
        raise PictureInputError(
            f"--mask / masks: {count} mask file(s) for {len(images)} image(s); expected one mask file per image "
            f"({len(images)}), in the order of the images"
        )
    items = dense_images(model, images, size=size, layer=layer)
    foreground = None if masks is None else [read_mask(mask, item) for mask, item in zip(masks, items)]
    colours, foreground = pca_colours([item.features for item in items], foreground)
    patches = sum(int(f.sum()) for f in foreground)
    source = "the masks given" if masks is not None else "the first component's sign, as DINOv2"
    fig, axes = _figure_rows(
        items,
        f"block {items[0].block}: 3 whitened components fit on the {patches} foreground patches of all images "
        f"(foreground: {source})",
    )
    for (ax_image, ax_map), item, colour in zip(axes, items, colours):
        show_image(ax_image, item.display, item.name)
        _show_map(ax_map, item, to_numpy_image(colour), f"PCA, {_grid(colour)}")
    return finish(fig, out, dpi)


def plot_similarity(
    model: nn.Module,
    images: Sequence[Image],
    query: Sequence[int],
    *,
    size: int | None = None,
    layer: int = -1,
    out: str | os.PathLike[str] | None = None,
    dpi: int = 100,
) -> Figure:
    """Each image beside the cosine similarity of its patches with the patch at `query` = (row,
    column) of the first image (marked), on one colour scale. 10 inches wide; writes a PNG when
    `out` is given."""
    items = dense_images(model, images, size=size, layer=layer)
    grid = (items[0].features.shape[1], items[0].features.shape[2])
    row, column = check_query(query, grid, items[0].name)
    maps = patch_similarity([item.features for item in items], (row, column))
    low = min(float(m.min()) for m in maps)
    fig, axes = _figure_rows(
        items, f"block {items[0].block}: cosine similarity to patch ({row}, {column}) of {items[0].name}"
    )
    for i, ((ax_image, ax_map), item, similarity) in enumerate(zip(axes, items, maps)):
        show_image(ax_image, item.display, item.name)
        style = dict(cmap=HEAT_CMAP, vmin=low, vmax=1.0)
        shown = _show_map(
            ax_map,
            item,
            similarity.numpy(),
            f"similarity, {_grid(similarity)}, [{float(similarity.min()):.2f}, 1]",
            **style,
        )
        fig.colorbar(shown, ax=ax_map, shrink=0.8)
        if i == 0:
            _mark(ax_image, item, row, column)
            _mark(ax_map, item, row, column)
    return finish(fig, out, dpi)


def _mark(ax: Any, item: DenseImage, row: int, column: int) -> None:
    """A square around the patch at (row, column) of `item`."""
    from matplotlib.patches import Rectangle

    height, width = item.display.shape[1:]
    ph, pw = height / item.features.shape[1], width / item.features.shape[2]
    ax.add_patch(Rectangle((column * pw, row * ph), pw, ph, fill=False, edgecolor="cyan", linewidth=1.5))
