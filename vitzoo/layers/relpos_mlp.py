"""A continuous relative position bias: an MLP over log-spaced patch offsets (timm's relpos ViT).

Swin Transformer V2 (Liu et al., 2022) replaced the learned table of relative position biases by a
small network. For two patches (r1, c1) and (r2, c2) of a (rows, columns) grid, the offset
(dr, dc) = (r1 - r2, c1 - c2) is mapped to log-spaced coordinates

    f(d) = sign(d) * log(1 + |d|)            (timm's "cr" mode: natural log, not normalised)

and a two-layer MLP (2 -> hidden -> heads, ReLU; dropout 0.125 on the hidden units in training)
turns them into one bias per head. The bias is added to the attention logits of every pair of
patches, softmax(q k^T / sqrt(d) + B) v (layers/attention.py's `attn_bias`); the prefix tokens
(class token) get zero bias. The coordinates are not normalised by the grid, so the same MLP gives
a bias for any grid: `set_grid` (the model's `set_input_size`) only recomputes the offsets.

timm's `vision_transformer_relpos` (`vit_relpos_*`, `vit_srelpos_*`) holds one such MLP per block
(`blocks.i.attn.rel_pos.mlp.{fc1,fc2}`; vitzoo's block holds it as `blocks.i.rel_pos`, beside
BEiT's table, relpos_bias.py) or one shared by every block (`shared_rel_pos.mlp.*`, the same name
in vitzoo): ViTConfig.rel_pos_mlp (the hidden width) and rel_pos_mlp_shared. The offset index and
coordinates are buffers rebuilt from the grid, not saved.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

REL_POS_DROP = 0.125  # timm's dropout on the MLP's hidden units (training only)


def relative_position_index(grid: tuple[int, int], device: torch.device | str | None = None) -> torch.Tensor:
    """(rows * cols) ** 2 rows of the flattened (2 rows - 1, 2 cols - 1) offset grid, query-major:
    entry (i, j) is the offset of patch i from patch j (patches row-major)."""
    rows, cols = grid
    r = torch.arange(rows, device=device).repeat_interleave(cols)
    c = torch.arange(cols, device=device).repeat(rows)
    dr = r[:, None] - r[None, :] + rows - 1
    dc = c[:, None] - c[None, :] + cols - 1
    return (dr * (2 * cols - 1) + dc).reshape(-1)


def log_relative_coords(grid: tuple[int, int], device: torch.device | str | None = None) -> torch.Tensor:
    """(2 rows - 1, 2 cols - 1, 2) offsets (dr, dc) as sign(d) * log(1 + |d|), float32."""
    rows, cols = grid
    dr = torch.arange(-(rows - 1), rows, device=device, dtype=torch.float32)
    dc = torch.arange(-(cols - 1), cols, device=device, dtype=torch.float32)
    coords = torch.stack(torch.meshgrid(dr, dc, indexing="ij"), dim=-1)
    return torch.sign(coords) * torch.log1p(coords.abs())


class CoordMlp(nn.Module):
    """2 -> hidden -> heads with ReLU between (timm's Mlp names: fc1, fc2)."""

    def __init__(self, hidden_dim: int, num_heads: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, num_heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.dropout(F.relu(self.fc1(x)), p=REL_POS_DROP, training=self.training))


class RelPosMlp(nn.Module):
    """() -> (1, heads, P + N, P + N): the bias of a (rows, cols) grid behind `prefix_tokens` tokens."""

    relative_position_index: torch.Tensor
    rel_coords_log: torch.Tensor

    def __init__(self, *, num_heads: int, grid: tuple[int, int], hidden_dim: int, prefix_tokens: int = 0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.prefix_tokens = prefix_tokens
        self.grid = (int(grid[0]), int(grid[1]))
        self.mlp = CoordMlp(hidden_dim, num_heads)
        self.register_buffer("relative_position_index", relative_position_index(self.grid), persistent=False)
        self.register_buffer("rel_coords_log", log_relative_coords(self.grid), persistent=False)

    def init_non_persistent_buffers(self) -> None:
        """The index and coordinates again, from the grid (after a load by assignment from meta)."""
        device = "cpu" if self.rel_coords_log.is_meta else self.rel_coords_log.device
        self.relative_position_index = relative_position_index(self.grid, device)
        self.rel_coords_log = log_relative_coords(self.grid, device)

    def set_grid(self, grid: tuple[int, int]) -> None:
        """`set_input_size`: the model's grid changes for good; the offsets follow (the MLP is unchanged)."""
        self.grid = (int(grid[0]), int(grid[1]))
        self.init_non_persistent_buffers()

    def forward(self) -> torch.Tensor:
        n = self.grid[0] * self.grid[1]
        table = self.mlp(self.rel_coords_log.to(self.mlp.fc1.weight.dtype)).reshape(-1, self.num_heads)
        bias = table[self.relative_position_index].reshape(n, n, self.num_heads).permute(2, 0, 1)
        if self.prefix_tokens:  # the class token: no bias to or from it
            bias = F.pad(bias, [self.prefix_tokens, 0, self.prefix_tokens, 0])
        return bias.unsqueeze(0).contiguous()

    def extra_repr(self) -> str:
        return f"grid={self.grid}, num_heads={self.num_heads}, prefix_tokens={self.prefix_tokens}"
