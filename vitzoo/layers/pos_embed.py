"""Position embeddings.

Self-attention is permutation invariant, so each token gets a vector that says where it came from.
ViT's ImageNet models *learn* one vector per position (an nn.Parameter, see vitzoo/model/positions.py); the
MNIST tutorial uses the fixed sinusoids of "Attention Is All You Need", computed here.

A learned table belongs to one grid of patches. For another input size, `resample_abs_pos_embed`
treats the patch part as a D-channel image and resizes it (what timm does, so the two agree).
RADIO stores one table for its largest input and crops it (`crop_resample_pos_embed`, its CPE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sincos_1d(num_positions: int, dim: int) -> torch.Tensor:
    """Fixed 1-D sinusoidal table of shape (num_positions, dim):

        PE(pos, 2i)     = sin(pos / 10000^(2i / dim))
        PE(pos, 2i + 1) = cos(pos / 10000^(2i / dim))

    Computed in float64 on the CPU (also when a model is built on the meta device, so that the
    table is real data) and returned as float32. An odd `dim` ends on a sine column.
    """
    if num_positions <= 0 or dim <= 0:
        raise ValueError(f"sincos_1d needs positive num_positions and dim, got {num_positions} and {dim}")
    pos = torch.arange(num_positions, dtype=torch.float64, device="cpu").unsqueeze(1)  # (P, 1)
    two_i = torch.arange(0, dim, 2, dtype=torch.float64, device="cpu")  # 0, 2, 4, ... = 2i
    angle = pos / torch.pow(10000.0, two_i / dim)  # (P, ceil(dim / 2))
    table = torch.empty(num_positions, dim, dtype=torch.float64, device="cpu")
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return table.float()


def resample_abs_pos_embed(
    pos_embed: torch.Tensor,
    *,
    new_grid: tuple[int, int],
    old_grid: tuple[int, int],
    num_prefix_tokens: int,
    antialias: bool = True,
    mode: str = "bicubic",
) -> torch.Tensor:
    """(1, prefix + gh * gw, D) -> (1, prefix + GH * GW, D).

    The first `num_prefix_tokens` rows (class, distillation, register tokens) have no place on the
    grid and are kept as they are; the rest is reshaped to a (D, gh, gw) image and resized
    bicubically, with antialiasing when it shrinks, in float32 (timm's `resample_abs_pos_embed`,
    the same numbers; `antialias=False` as transformers' DINOv2 resamples; `mode="bilinear"` as
    transformers' SigLIP 2 resamples). The same grid returns the table itself, except for a
    symbolic grid (torch.export with a dynamic size), which a comparison would pin to the
    example's size."""
    symbolic = any(isinstance(side, torch.SymInt) for side in new_grid)
    if not symbolic and tuple(new_grid) == tuple(old_grid):
        return pos_embed
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    dim = grid.shape[-1]
    image = grid.float().reshape(1, old_grid[0], old_grid[1], dim).permute(0, 3, 1, 2)
    image = F.interpolate(image, size=tuple(new_grid), mode=mode, align_corners=False, antialias=antialias)
    grid = image.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], dim).to(pos_embed.dtype)
    return torch.cat([prefix, grid], dim=1)


def tile_pos_embed(pos_embed: torch.Tensor, *, new_grid: tuple[int, int], old_grid: tuple[int, int]) -> torch.Tensor:
    """SAM 3's position table for another grid (transformers' `Sam3ViTEmbeddings`): the (1, gh * gw, D)
    table of its pretraining grid repeated along rows and columns, the top-left `new_grid` kept, no
    interpolation. No prefix rows: the table covers the patches only."""
    rows, cols = new_grid
    dim = pos_embed.shape[-1]
    image = pos_embed.reshape(1, old_grid[0], old_grid[1], dim)
    image = image.repeat(1, -(-rows // old_grid[0]), -(-cols // old_grid[1]), 1)[:, :rows, :cols]
    return image.reshape(1, rows * cols, dim).clone()


def crop_resample_pos_embed(
    pos_embed: torch.Tensor, *, new_grid: tuple[int, int], old_grid: tuple[int, int]
) -> torch.Tensor:
    """RADIO's cropped position embedding (CPE), as NVIDIA's code, timm's converter and
    transformers' RadioModel compute it: the (1, gh * gw, D) table of the largest input is resized
    bilinearly (no antialiasing) to a square of the longer side of `new_grid`, and its top-left
    `new_grid` is kept. No prefix rows: RADIO's table covers the patches only."""
    rows, cols = new_grid
    side = max(rows, cols)
    dim = pos_embed.shape[-1]
    image = pos_embed.float().reshape(1, old_grid[0], old_grid[1], dim).permute(0, 3, 1, 2)
    image = F.interpolate(image, size=(side, side), mode="bilinear", align_corners=False)[..., :rows, :cols]
    return image.permute(0, 2, 3, 1).reshape(1, rows * cols, dim).to(pos_embed.dtype)
