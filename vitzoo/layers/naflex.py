"""Patch-sequence batches (NaFlex, "native resolution"): images of any size and aspect ratio, each
cut into its own grid of patches, padded to one sequence length.

The batch is timm's (timm/models/naflexvit.py, its NaFlex collator) and what transformers'
Siglip2ImageProcessor gives, renamed:

    PATCHES      (B, L, p * p * C) float, in the model's normalisation; each patch's pixels in
                 (row, column, channel) order (timm's `batch_patchify`, transformers' patches)
    PATCH_COORD  (B, L, 2) integer (row, column) of each patch in its own image's grid
    PATCH_VALID  (B, L) bool, False for padding

Other keys are ignored. An image's grid is (largest valid row + 1, largest valid column + 1).
What the model does with such a batch (vitzoo/model/vision_transformer.py dispatches here):

    tokens     Linear(patches) with the patch convolution's kernel, reordered to (row, column,
               channel) (`linear_patch_weight`): the same map as the convolution
    positions  the learned table resampled to each image's grid, once per distinct grid size
               (`resample_table`, rules in POS_RESAMPLE), then gathered by each patch's coordinate;
               a rotary embedding from each patch's position in its grid (`rope_for_sequence`)
    attention  padding masked out as keys (`PatchSequence.attn_mask`: (B, 1, 1, prefix + L),
               True = attend); padding tokens still compute, their outputs mean nothing
    pooling    "avg" over the valid patches (`masked_mean`), "map" with the same key mask,
               "token" unchanged

The table rules (`ViTConfig.pos_resample`):

    "timm"         timm's NaFlexEmbeds default: bicubic, antialiased, align_corners=False, the
                   table resized to the image's (rows, columns)
    "timm_square"  timm's pos_embed_ar_preserving: resized to a square of the longer side, its
                   top-left (rows, columns) kept
    "siglip2"      transformers' Siglip2VisionEmbeddings (and timm's naflexvit *_siglip):
                   bilinear, antialiased, align_corners=False, to (rows, columns)
    "radio"        C-RADIO (timm's naflexvit *_radio_v3 L/g and *_radio_v4): bilinear, not
                   antialiased, align_corners=False, to a square of the longer side, top-left kept
    "radio_corners" the same with align_corners=True (C-RADIOv3 B and H as released)
    "tile"         SAM 3 (transformers' Sam3ViTEmbeddings): not interpolated, the table repeated
                   over rows and columns and its top-left (rows, columns) kept (pos_embed.py
                   `tile_pos_embed`); SAM 3's own when the model's grid is a multiple of its
                   pretraining grid (the release's 72 = 3 x 24)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from ..checks import MAX_TOKENS
from ..errors import VitzooError
from .pos_embed import tile_pos_embed
from .rope import RotaryEmbedding2d

PATCHES, PATCH_COORD, PATCH_VALID = "patches", "patch_coord", "patch_valid"
BATCH_KEYS = (PATCHES, PATCH_COORD, PATCH_VALID)
# A patch-sequence batch: the three keys above (and any others, ignored).
PatchBatch = Mapping[str, torch.Tensor]

PosResample = Literal["timm", "timm_square", "siglip2", "radio", "radio_corners", "tile"]


@dataclass(frozen=True)
class TableRule:
    """How a rule resizes the table: F.interpolate's mode, antialias and align_corners, and whether
    to a square of the grid's longer side (its top-left rows and columns kept); mode "tile": repeated,
    not interpolated."""

    mode: str
    square: bool = False
    antialias: bool = True
    align_corners: bool = False


RULES: dict[str, TableRule] = {
    "timm": TableRule("bicubic"),
    "timm_square": TableRule("bicubic", square=True),
    "siglip2": TableRule("bilinear"),
    "radio": TableRule("bilinear", square=True, antialias=False),
    "radio_corners": TableRule("bilinear", square=True, antialias=False, align_corners=True),
    "tile": TableRule("tile", antialias=False),
}
POS_RESAMPLE: tuple[str, ...] = tuple(RULES)


class PatchBatchError(VitzooError, ValueError):
    """A patch-sequence batch the model cannot take (a key, a dtype, a shape, a coordinate)."""


def is_patch_batch(x: object) -> bool:
    """Whether a model input is a patch-sequence batch (a mapping) rather than an image tensor."""
    return isinstance(x, Mapping)


@dataclass
class PatchSequence:
    """A checked batch and the grids of its images (`read_patch_batch`)."""

    patches: torch.Tensor  # (B, L, p * p * C)
    coord: torch.Tensor  # (B, L, 2) int64, padding's set to 0
    valid: torch.Tensor  # (B, L) bool
    grids: list[tuple[int, int]]  # the distinct (rows, columns) grids, in order of first use
    # (B, L): each patch's row in the per-grid tables concatenated in `grids` order (row-major)
    index: torch.Tensor

    def gather(self, per_grid: Callable[[tuple[int, int]], torch.Tensor]) -> torch.Tensor:
        """(B, L, ...) from `per_grid(grid)`, a (rows * columns, ...) tensor for each distinct
        grid (computed once each): each patch's row at its coordinate in its image's grid."""
        return torch.cat([per_grid(grid) for grid in self.grids])[self.index]

    def attn_mask(self, prefix: int) -> torch.Tensor:
        """(B, 1, 1, prefix + L) bool key mask: prefix tokens and valid patches True."""
        return key_mask(self.valid, prefix)


def key_mask(valid: torch.Tensor, prefix: int = 0) -> torch.Tensor:
    """(B, L) validity -> (B, 1, 1, prefix + L) bool mask of the keys attention may use (SDPA's:
    True attends), the `prefix` tokens in front always valid."""
    if prefix:
        valid = F.pad(valid, (prefix, 0), value=True)
    return valid[:, None, None, :]


def _refuse(message: str) -> PatchBatchError:
    return PatchBatchError(f"patch-sequence batch: {message}")


def _check_layout(batch: PatchBatch, patch_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    missing = [key for key in BATCH_KEYS if key not in batch]
    if missing:
        raise _refuse(f"missing key(s) {', '.join(map(repr, missing))}; expected the keys {', '.join(BATCH_KEYS)}")
    patches, coord, valid = (batch[key] for key in BATCH_KEYS)
    for key, value in zip(BATCH_KEYS, (patches, coord, valid)):
        if not isinstance(value, torch.Tensor):
            raise _refuse(f"{key!r} is a {type(value).__name__}; expected a torch.Tensor")
    if not patches.is_floating_point():
        raise _refuse(f"{PATCHES!r} has dtype {patches.dtype}; expected a floating-point tensor")
    if coord.is_floating_point() or coord.is_complex() or coord.dtype == torch.bool:
        raise _refuse(f"{PATCH_COORD!r} has dtype {coord.dtype}; expected an integer tensor")
    if valid.dtype != torch.bool:
        raise _refuse(f"{PATCH_VALID!r} has dtype {valid.dtype}; expected torch.bool (False for padding)")
    if patches.dim() != 3 or patches.shape[-1] != patch_dim:
        raise _refuse(
            f"{PATCHES!r} has shape {tuple(patches.shape)}; expected (B, L, {patch_dim}) for this model "
            "(patch height x patch width x channels)"
        )
    batch_len = tuple(patches.shape[:2])
    if tuple(coord.shape) != (*batch_len, 2) or tuple(valid.shape) != batch_len:
        raise _refuse(
            f"shapes disagree: {PATCHES!r} {tuple(patches.shape)}, {PATCH_COORD!r} {tuple(coord.shape)}, "
            f"{PATCH_VALID!r} {tuple(valid.shape)}; expected (B, L, {patch_dim}), (B, L, 2) and (B, L)"
        )
    if batch_len[0] == 0 or batch_len[1] == 0:
        raise _refuse(f"{PATCHES!r} has shape {tuple(patches.shape)}; expected at least one image and one patch")
    return patches, coord, valid


def read_patch_batch(batch: PatchBatch, patch_size: tuple[int, int], in_chans: int) -> PatchSequence:
    """Check a batch against a model of `patch_size` and `in_chans` (one PatchBatchError naming
    the key and what was expected) and find its images' grids."""
    patches, coord, valid = _check_layout(batch, patch_size[0] * patch_size[1] * in_chans)
    device = patches.device
    coord, valid = coord.to(device=device, dtype=torch.int64), valid.to(device)
    coord = coord.masked_fill(~valid[..., None], 0)
    counts, lowest, sizes = valid.sum(1), coord.amin(1), coord.amax(1) + 1
    empty = (counts == 0).nonzero().flatten().tolist()
    if empty:
        raise _refuse(f"row(s) {empty[:8]} of {PATCH_VALID!r} have no valid patch; expected at least one per image")
    negative = (lowest < 0).any(1).nonzero().flatten().tolist()
    if negative:
        raise _refuse(
            f"row(s) {negative[:8]} of {PATCH_COORD!r} hold negative coordinates; expected (row, column) >= 0"
        )
    grids: list[tuple[int, int]] = []
    slot: list[int] = []
    for rows, cols in sizes.tolist():
        if rows * cols > MAX_TOKENS:
            raise _refuse(
                f"an image's grid of {rows} x {cols} patches (its largest coordinates + 1) is too large; "
                f"expected at most {MAX_TOKENS} patches"
            )
        if (rows, cols) not in grids:
            grids.append((rows, cols))
        slot.append(grids.index((rows, cols)))
    starts = torch.tensor([0] + [r * c for r, c in grids]).cumsum(0)[:-1]
    offset = starts[slot].to(device)
    index = coord[..., 0] * sizes[:, 1:] + coord[..., 1] + offset[:, None]
    return PatchSequence(patches, coord, valid, grids, index)


def linear_patch_weight(conv_weight: torch.Tensor) -> torch.Tensor:
    """The patch convolution's kernel (D, C, ph, pw) as a Linear's weight (D, ph * pw * C) over
    patches flattened in (row, column, channel) order: the same map, reordered."""
    return conv_weight.permute(0, 2, 3, 1).flatten(1)


def embed_patches(seq: PatchSequence, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(B, L, D) patch tokens: the patch convolution applied to each flattened patch."""
    return F.linear(seq.patches.to(weight.dtype), linear_patch_weight(weight), bias)


def resample_table(table: torch.Tensor, old_grid: tuple[int, int], grid: tuple[int, int], rule: str) -> torch.Tensor:
    """A learned table's patch rows (old_grid[0] * old_grid[1], D) for another grid, by `rule`
    (see the module docstring): (grid[0] * grid[1], D), the table itself for its own grid."""
    how = RULES.get(rule)
    if how is None:
        raise ValueError(f"pos_resample={rule!r} is invalid; expected one of {', '.join(map(repr, POS_RESAMPLE))}")
    if tuple(grid) == tuple(old_grid):
        return table
    if how.mode == "tile":
        return tile_pos_embed(table.unsqueeze(0), new_grid=(grid[0], grid[1]), old_grid=(old_grid[0], old_grid[1]))[0]
    size = (max(grid), max(grid)) if how.square else grid
    image = table.float().reshape(1, old_grid[0], old_grid[1], -1).permute(0, 3, 1, 2)
    image = F.interpolate(image, size=size, mode=how.mode, align_corners=how.align_corners, antialias=how.antialias)
    image = image[:, :, : grid[0], : grid[1]]
    return image.permute(0, 2, 3, 1).reshape(grid[0] * grid[1], -1).to(table.dtype)


def add_positions(
    seq: PatchSequence,
    x: torch.Tensor,
    rows_for_grid: Callable[[tuple[int, int]], torch.Tensor] | None,
    prefix_tokens: Sequence[torch.Tensor],
    prefix_rows: torch.Tensor | None,
) -> torch.Tensor:
    """(B, L, D) patch tokens -> (B, prefix + L, D): each patch plus its position (`rows_for_grid`
    gives a grid's (rows * columns, D) table; None: no table) and the (1, n, D) prefix tokens in
    front, plus `prefix_rows` (their rows of the table, a model without no_embed_class)."""
    prefix = [t.expand(x.shape[0], -1, -1) for t in prefix_tokens]
    if rows_for_grid is not None:
        x = x + seq.gather(rows_for_grid)
    if prefix and prefix_rows is not None:
        prefix = [torch.cat(prefix, dim=1) + prefix_rows]
    return torch.cat([*prefix, x], dim=1) if prefix else x


def rope_for_sequence(rope: RotaryEmbedding2d, seq: PatchSequence) -> torch.Tensor:
    """The rotary embedding of every patch at its position in its own grid (the positions a plain
    image of that grid gives it): (B, 1, prefix + L, 2 * head_dim), for "mixed"
    (depth, B, heads, prefix + L, 2 * head_dim); the prefix rows rotate nothing."""
    coords = seq.gather(rope.coords)  # (B, L, 2)
    embed = rope.from_coords(coords, batched=True)
    return embed if rope.kind == "mixed" else embed.unsqueeze(1)


def masked_mean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(B, L, D) -> (B, D): the mean over the valid tokens (timm's `global_pool_naflex` "avg")."""
    weights = valid.to(x.dtype).unsqueeze(-1)
    return (x * weights).sum(1) / weights.sum(1).clamp(min=1)
