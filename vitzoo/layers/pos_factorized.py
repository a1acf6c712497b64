"""Factorized position embedding (NaViT, "Patch n' Pack", Dehghani et al. 2023; timm's NaFlexVit
`pos_embed='factorized'`).

Instead of one learned vector per grid cell (rows x columns of them), the model learns one vector
per row and one per column and adds the two:

    pos[r, c] = pos_embed_y[0, r] + pos_embed_x[0, c]        (rows + columns vectors of width D)

Both tables belong to the grid the model was built for. For another (rows, columns) grid each
table is resampled on its own, as a D-channel 1-D signal: linear interpolation, align_corners=False,
no antialiasing, in float32 (timm's NaFlexEmbeds), a table of the right length used as it is:

    per axis ("timm")            pos_embed_y -> rows, pos_embed_x -> columns
    aspect-preserving            both -> max(rows, columns), then the first rows / columns kept
    ("timm_square", timm's pos_embed_ar_preserving)

so an image keeps the same scale on both axes and a thin image reads the start of each table.
Only patches get positions: prefix tokens (class, registers) have none (ViTConfig.no_embed_class).
"""

from __future__ import annotations

import typing

import torch
import torch.nn.functional as F

FACTORIZED_RULES = ("timm", "timm_square")


def resample_axis(table: torch.Tensor, length: int | torch.SymInt) -> torch.Tensor:
    """A (1, n, D) axis table at `length` positions: linear, align_corners=False, no antialias, in
    float32 and back to the table's dtype; the table itself at its own length (a symbolic length,
    under torch.export, is always interpolated: at scale 1 that is the identity)."""
    if not isinstance(length, torch.SymInt) and length == table.shape[1]:
        return table
    size = typing.cast(int, length)  # a SymInt stays symbolic
    line = F.interpolate(table.float().transpose(1, 2), size=size, mode="linear", align_corners=False)
    return line.transpose(1, 2).to(table.dtype)


def factorized_axes(
    pos_y: torch.Tensor, pos_x: torch.Tensor, grid: tuple[int, int], rule: str = "timm"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (1, rows, D) and (1, columns, D) axis tables for a (rows, columns) grid by `rule`
    (see the module docstring)."""
    if rule not in FACTORIZED_RULES:
        raise ValueError(
            f"pos_resample={rule!r} is invalid for a factorized table; expected one of "
            + ", ".join(map(repr, FACTORIZED_RULES))
        )
    rows, cols = grid
    len_y, len_x = (max(rows, cols), max(rows, cols)) if rule == "timm_square" else (rows, cols)
    return resample_axis(pos_y, len_y)[:, :rows], resample_axis(pos_x, len_x)[:, :cols]


def factorized_table(
    pos_y: torch.Tensor, pos_x: torch.Tensor, grid: tuple[int, int], rule: str = "timm"
) -> torch.Tensor:
    """(1, rows * columns, D): row r's vector plus column c's, row-major, for a (rows, columns) grid."""
    return factorized_sum(*factorized_axes(pos_y, pos_x, grid, rule))


def factorized_sum(pos_y: torch.Tensor, pos_x: torch.Tensor) -> torch.Tensor:
    """(1, rows, D) and (1, columns, D) -> (1, rows * columns, D): every row's vector plus every
    column's, row-major (the tables' own grid, no resampling)."""
    return (pos_y.unsqueeze(2) + pos_x.unsqueeze(1)).flatten(1, 2)


def factorized_for_image(
    pos_y: torch.Tensor, pos_x: torch.Tensor, image_size: torch.Size, patch_size: tuple[int, int], rule: str
) -> torch.Tensor:
    """`dynamic_img_size`: the (1, N, D) table for an image of `image_size` (whole patches). A leaf of
    torch.fx graphs (vitzoo/model/vision_transformer.py wraps it), so a traced model adapts to each input's size."""
    grid = (image_size[0] // patch_size[0], image_size[1] // patch_size[1])
    return factorized_table(pos_y, pos_x, grid, rule)
