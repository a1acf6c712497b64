"""`posembed`: what the position embedding knows about the 2-D layout.

For each patch position, the cosine similarity of its position embedding with every other
position's, drawn as a small map on the patch grid and the maps laid out on the grid themselves
(ViT paper, Fig. 7 centre). A learned embedding that has picked up the 2-D structure shows a bright
spot at the patch's own place and bands along its row and column. The fixed 1-D sinusoids are
indexed by the flattened (row-major) position, so they show row-wise stripes instead.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ._figure import finish, mosaic, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def patch_position_embedding(model: nn.Module) -> torch.Tensor:
    """The (N, D) position embeddings of the patch tokens (the prefix tokens' rows dropped)."""
    return _patch_positions(model)[0]


def _patch_positions(model: nn.Module) -> tuple[torch.Tensor, tuple[int, int]]:
    """`patch_position_embedding(model)` and the patch grid (gh, gw) it lies on."""
    pos = getattr(model, "pos_embed", None)
    patch_embed = getattr(model, "patch_embed", None)
    if not isinstance(pos, torch.Tensor) or patch_embed is None:
        raise ValueError(f"{type(model).__name__} has no pos_embed / patch_embed; expected a vitzoo VisionTransformer")
    n = patch_embed.num_patches
    table = pos.detach().reshape(-1, pos.shape[-1])
    if table.shape[0] < n:
        raise ValueError(f"pos_embed has {table.shape[0]} rows but the model has {n} patches; expected at least {n}")
    gh, gw = patch_embed.grid_size
    return table[table.shape[0] - n :].float().cpu(), (gh, gw)  # prefix tokens come first (vitzoo/model/)


def position_similarity(model: nn.Module) -> torch.Tensor:
    """(gh, gw, gh, gw): [i, j] is the cosine-similarity map of patch (i, j)'s position embedding
    with every position on the grid."""
    pos, (gh, gw) = _patch_positions(model)
    unit = F.normalize(pos.double(), dim=-1)
    return (unit @ unit.T).float().reshape(gh, gw, gh, gw)


def plot_position_embedding(model: nn.Module, *, out: str | os.PathLike[str] | None = None, dpi: int = 100) -> Figure:
    """Cosine similarity between position embeddings, learned or sinusoidal, on the patch grid.
    Writes a 1000 x 500 px PNG (at dpi 100) when `out` is given; returns the figure."""
    sim = position_similarity(model)
    gh, gw = sim.shape[:2]
    kind = "learned" if isinstance(getattr(model, "pos_embed", None), nn.Parameter) else "fixed sinusoidal"

    fig = new_figure(10, 5)
    ax_grid, ax_mat = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    tiles = sim.reshape(gh * gw, 1, gh, gw)
    pad = 1 if max(gh, gw) > 4 else 0
    image = ax_grid.imshow(
        mosaic(tiles, ncols=gw, pad=pad, pad_value=float("nan")),
        cmap="viridis",
        vmin=-1,
        vmax=1,
        interpolation="nearest",
    )
    ax_grid.set_title(
        f"{kind} position embedding: similarity of each of\nthe {gh}x{gw} positions with all others", fontsize=9
    )
    ax_grid.set_xlabel("input patch column", fontsize=8)
    ax_grid.set_ylabel("input patch row", fontsize=8)
    # One tick per small map, at its centre, labelled with the patch row / column it belongs to.
    step_x, step_y = gw + pad, gh + pad
    ax_grid.set_xticks([j * step_x + (gw - 1) / 2 for j in range(gw)], [str(j + 1) for j in range(gw)], fontsize=6)
    ax_grid.set_yticks([i * step_y + (gh - 1) / 2 for i in range(gh)], [str(i + 1) for i in range(gh)], fontsize=6)
    fig.colorbar(image, ax=ax_grid, shrink=0.8, label="cosine similarity")

    ax_mat.imshow(sim.reshape(gh * gw, gh * gw).numpy(), cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax_mat.set_title(f"all pairs: {gh * gw} x {gh * gw} (row-major token order)", fontsize=9)
    ax_mat.set_xlabel("token", fontsize=8)
    ax_mat.set_ylabel("token", fontsize=8)
    ax_mat.tick_params(labelsize=7)
    return finish(fig, out, dpi)
