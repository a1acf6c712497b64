"""`patches`: how an image becomes a sequence of tokens.

Three panels: the image with its patch grid (and the token index of each patch when there are
few enough to read), the patches as the sequence the Transformer sees (row-major, wrapped), and
that sequence as the matrix of flattened patch vectors, (N tokens) x (C * ph * pw values), which
is exactly what the patch embedding's Linear multiplies (layers/patch_embed.py: `patchify`).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import torch

from ..layers import patchify, to_2tuple
from ._figure import finish, new_figure, show_image, tile_picture
from .images import read_image

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_MAX_LABELLED_PATCHES = 100  # beyond this the index labels would overlap and only add noise


def check_divisible(image_size: tuple[int, int], patch_size: tuple[int, int]) -> None:
    (h, w), (ph, pw) = image_size, patch_size
    if ph <= 0 or pw <= 0 or h % ph or w % pw:
        raise ValueError(
            f"patch size {ph}x{pw} does not tile the {h}x{w} image; expected a positive patch size "
            f"dividing both sides (e.g. a common divisor of {h} and {w})"
        )


def patch_sequence(image: torch.Tensor, patch_size: int | tuple[int, int]) -> torch.Tensor:
    """(C, H, W) image -> (N, C, ph, pw) patches in token order (row-major over the grid)."""
    ph, pw = to_2tuple(patch_size, "patch_size")
    if image.ndim != 3:
        raise ValueError(f"expected a (C, H, W) image, got shape {tuple(image.shape)}")
    check_divisible((image.shape[1], image.shape[2]), (ph, pw))
    flat = patchify(image.unsqueeze(0), (ph, pw))[0]  # (N, C * ph * pw), channel-major per patch
    return flat.reshape(flat.shape[0], image.shape[0], ph, pw)


def plot_patches(
    image: torch.Tensor | str | os.PathLike[str],
    patch_size: int | tuple[int, int] = 16,
    *,
    out: str | os.PathLike[str] | None = None,
    dpi: int = 100,
) -> Figure:
    """Draw `image` ((C, H, W) in [0, 1], or an image file) cut into `patch_size` patches.
    Writes a 1200 x 400 px PNG (at dpi 100) when `out` is given; returns the figure."""
    if not isinstance(image, torch.Tensor):
        image = read_image(image)
    ph, pw = to_2tuple(patch_size, "patch_size")
    tiles = patch_sequence(image, (ph, pw))
    _, h, w = image.shape
    gh, gw = h // ph, w // pw
    n = gh * gw

    fig = new_figure(12, 4)
    ax_img, ax_seq, ax_mat = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1.25, 1]})

    show_image(ax_img, image, f"{h}x{w} image, {gh}x{gw} grid of {ph}x{pw} patches")
    ax_img.vlines([j * pw - 0.5 for j in range(1, gw)], -0.5, h - 0.5, colors="yellow", linewidths=0.8)
    ax_img.hlines([i * ph - 0.5 for i in range(1, gh)], -0.5, w - 0.5, colors="yellow", linewidths=0.8)
    if n <= _MAX_LABELLED_PATCHES:
        for i in range(gh):
            for j in range(gw):
                ax_img.text(
                    j * pw + pw / 2 - 0.5,
                    i * ph + ph / 2 - 0.5,
                    str(i * gw + j),
                    color="yellow",
                    fontsize=7 if n > 25 else 9,
                    ha="center",
                    va="center",
                )

    # The sequence wraps at a width unlike the grid's on purpose (wider, about 1.6 sqrt(N) tokens,
    # so the strip fills its panel): the Transformer sees a 1-D sequence, and the 2-D layout
    # survives only in the position embedding.
    ncols = min(n, max(gw + 1, math.ceil(1.6 * math.sqrt(n))))
    pad = max(1, min(ph, pw) // 4)
    ax_seq.imshow(tile_picture(tiles, ncols=ncols, pad=pad), interpolation="nearest")
    ax_seq.set_title(f"as a sequence: {n} tokens, row-major (0 .. {n - 1})", fontsize=9)
    ax_seq.set_xticks([])
    ax_seq.set_yticks([])

    flat = tiles.reshape(n, -1).numpy()
    ax_mat.imshow(flat, aspect="auto", cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    ax_mat.set_title(f"flattened: {n} x {flat.shape[1]} (C*{ph}*{pw}) matrix", fontsize=9)
    ax_mat.set_xlabel("value in patch (channel, row, column)", fontsize=8)
    ax_mat.set_ylabel("token", fontsize=8)
    ax_mat.tick_params(labelsize=7)
    return finish(fig, out, dpi)
