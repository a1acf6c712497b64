"""BEiT's relative position bias (Bao et al., "BEiT: BERT Pre-Training of Image Transformers", 2022;
the table of Swin, with rows for the class token).

Each block learns one scalar per head for every relative offset (dy, dx) between two patches of
its (rows x columns) grid, a table of (2 rows - 1)(2 columns - 1) offsets, plus three rows for the
class token: class -> patch, patch -> class and class -> class. The bias of the attention logit of
query i and key j is the table's row for their offset,

    attn = softmax(q k^T / sqrt(d) + B),    B[h, i, j] = table[index[i, j], h],

added to the logits (layers/attention.py's `attn_bias`: the float mask of the fused kernel), so the
attention itself stays the fused one. The class token is token 0; `index` is a fixed (N + 1, N + 1)
buffer rebuilt from the grid, not saved (timm's names: `relative_position_bias_table`,
`relative_position_index`). A block holds it as `rel_pos` (the timm key
`blocks.i.attn.relative_position_bias_table` is renamed in weights/keymaps.py).

Another grid (`set_grid`, the model's `set_input_size`) resizes the offset rows as BEiT's fine-tuning
code and timm's `resize_rel_pos_bias_table` do: the source offsets are placed on a geometric
progression stretched to span the new range, and each new integer offset is interpolated linearly
between its neighbours (the class rows are kept). That is a Python computation over the grid
sizes, done once; a table per call (`dynamic_img_size`) is not offered.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

CLASS_ROWS = 3  # class -> patch, patch -> class, class -> class


def num_relative_distances(grid: tuple[int, int]) -> int:
    """The table's row count for a (rows, columns) grid: every offset, and the class token's rows."""
    return (2 * grid[0] - 1) * (2 * grid[1] - 1) + CLASS_ROWS


def relative_position_index(grid: tuple[int, int], device: torch.device | str | None = None) -> torch.Tensor:
    """(N + 1, N + 1) table rows of every (query, key) pair, the class token first, patches row-major."""
    rows, cols = grid
    coords = torch.stack(
        torch.meshgrid(torch.arange(rows, device=device), torch.arange(cols, device=device), indexing="ij")
    ).flatten(1)  # (2, N)
    offsets = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)  # (N, N, 2): (dy, dx)
    patch_rows = (offsets[..., 0] + rows - 1) * (2 * cols - 1) + (offsets[..., 1] + cols - 1)
    n, total = rows * cols, num_relative_distances(grid)
    index = torch.zeros((n + 1, n + 1), dtype=torch.long, device=device)
    index[1:, 1:] = patch_rows
    index[0, :] = total - 3  # class -> patch
    index[:, 0] = total - 2  # patch -> class
    index[0, 0] = total - 1  # class -> class
    return index


def _stretched_offsets(src: int, dst: int) -> list[float]:
    """BEiT's positions of `src` source offsets (-(src // 2) .. src // 2) on a geometric
    progression whose ratio q (bisected in [1.01, 1.5]) makes its half span about dst // 2."""
    left, right, q = 1.01, 1.5, 1.01
    while right - left > 1e-6:
        q = (left + right) / 2.0
        if (1.0 - q ** (src // 2)) / (1.0 - q) > dst // 2:
            right = q
        else:
            left = q
    side, cur = [], 1.0
    for i in range(src // 2):
        side.append(cur)
        cur += q ** (i + 1)
    return [-d for d in reversed(side)] + [0.0] + side


def _axis_weights(points: torch.Tensor, at: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Linear interpolation on an uneven axis: the left and right neighbours of each of `at`, the
    distances to them (both 1 on a point exactly), and their sum (scipy's and timm's rule)."""
    right = torch.bucketize(at, points).clamp(max=points.shape[0] - 1)
    left = (right - 1).clamp(0, points.shape[0] - 1)
    to_left, to_right = (at - points[left]).clamp(min=0), (points[right] - at).clamp(min=0)
    on_point = (to_left == 0) & (to_right == 0)
    to_left, to_right = to_left.masked_fill(on_point, 1.0), to_right.masked_fill(on_point, 1.0)
    return left, right, to_left, to_right, to_left + to_right


def resize_table(table: torch.Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int]) -> torch.Tensor:
    """A (offsets + 3, heads) table of `old_grid` for `new_grid`: the offset rows resampled as
    timm's `resize_rel_pos_bias_table` does (fp32, on the CPU), the class rows kept."""
    src = (2 * old_grid[0] - 1, 2 * old_grid[1] - 1)
    dst = (2 * new_grid[0] - 1, 2 * new_grid[1] - 1)
    if src == dst:
        return table
    heads = table.shape[1]
    if table.is_meta:
        return table.new_empty((num_relative_distances(new_grid), heads))
    values = table[:-CLASS_ROWS].float().cpu().T.reshape(heads, *src)  # (heads, src rows, src columns)
    axes = [
        _axis_weights(torch.tensor(_stretched_offsets(s, d)), torch.arange(-(d // 2), d // 2 + 0.1, 1.0))
        for s, d in zip(src, dst)
    ]
    (yl, yr, dyl, dyr, ysum), (xl, xr, dxl, dxr, xsum) = axes
    ys, xs = (yl, yr), (xl, xr)
    wy, wx = (dyr, dyl), (dxr, dxl)  # a neighbour's weight is the distance to the other one
    out = torch.zeros(heads, dst[0], dst[1])
    for a, b in itertools.product((0, 1), repeat=2):
        out = out + values[:, ys[a][:, None], xs[b][None, :]] * (wy[a][:, None] * wx[b][None, :])
    out = out / (ysum[:, None] * xsum[None, :])
    rows = out.reshape(heads, -1).T.to(device=table.device, dtype=table.dtype)
    return torch.cat([rows, table[-CLASS_ROWS:]], dim=0)


class RelPosBiasTable(nn.Module):
    """() -> (1, heads, N + 1, N + 1): the additive attention bias of one block (see the module docstring)."""

    relative_position_index: torch.Tensor

    def __init__(self, grid: tuple[int, int], num_heads: int) -> None:
        super().__init__()
        self.grid = (int(grid[0]), int(grid[1]))
        self.relative_position_bias_table = nn.Parameter(torch.zeros(num_relative_distances(self.grid), num_heads))
        self.register_buffer("relative_position_index", relative_position_index(self.grid), persistent=False)

    def init_non_persistent_buffers(self) -> None:
        """The index again, from the grid (after a load by assignment from the meta device)."""
        device = "cpu" if self.relative_position_index.is_meta else self.relative_position_index.device
        self.relative_position_index = relative_position_index(self.grid, device)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.relative_position_bias_table.zero_()  # BEiT's and timm's init

    def set_grid(self, grid: tuple[int, int]) -> None:
        """Resize the table for another grid, once (`resize_table`), and rebuild the index."""
        grid = (int(grid[0]), int(grid[1]))
        if grid == self.grid:
            return
        old = self.relative_position_bias_table
        with torch.no_grad():
            resized = resize_table(old, self.grid, grid)
        self.relative_position_bias_table = nn.Parameter(resized, requires_grad=old.requires_grad)
        self.grid = grid
        device = "cpu" if old.is_meta else old.device
        self.relative_position_index = relative_position_index(grid, device)

    def forward(self) -> torch.Tensor:
        n = self.relative_position_index.shape[0]
        bias = self.relative_position_bias_table[self.relative_position_index.reshape(-1)].reshape(n, n, -1)
        return bias.permute(2, 0, 1).unsqueeze(0)

    def extra_repr(self) -> str:
        return f"grid={self.grid}, num_heads={self.relative_position_bias_table.shape[1]}"
