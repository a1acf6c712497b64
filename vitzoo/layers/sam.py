"""The image encoder of Segment Anything (Kirillov et al., 2023), after ViTDet (Li et al., 2022).

A plain ViT on a 1024 px image has a 64 x 64 grid of patch tokens and no class token. Three changes
make it affordable and give it a dense output:

* **Windowed attention.** Most blocks cut the (rows, columns) grid into non-overlapping windows of
  `window_size` x `window_size` tokens and attend within each window only; the grid is padded with
  zeros at the bottom and right to a multiple of the window first, and the padding is cut away
  after (`window_partition` / `window_unpartition`). A few blocks (`global_attn_indexes`) attend
  over the whole grid, which carries information between windows.
* **Decomposed relative positions** (MViTv2). Each attention layer holds two learned tables,
  `rel_pos_h` (2 * rows - 1, head_dim) and `rel_pos_w` (2 * columns - 1, head_dim), one row per
  relative offset along each axis. For a query q at (i, j) and a key at (k, l) the logit gains

      q . rel_pos_h[i - k + rows - 1]  +  q . rel_pos_w[j - l + columns - 1]

  (`decomposed_rel_pos_bias`; the query unscaled), added before the softmax as a float bias (the
  `attn_bias` of layers/attention.py). A table sized for another grid is first resized linearly
  along its offsets (`sam_rel_pos_pairs`), as SAM's and timm's code do for another input size.
* **SAM 3's rotary positions** (`window_rope_embed`; SAM 3 has no relative tables). Each block rotates
  q and k (interleaved channel pairs, the (column, row) coordinates on the two halves of the head,
  axial frequencies of base `rope_temperature`) by the positions of what it attends over: a
  window's patch indices 0 .. window - 1, or in a global block the grid's indices scaled by
  window / columns, so that the grid spans one window (transformers' `Sam3ViTLayer`).
* **A convolutional neck** (`Neck`): a 1x1 convolution to `neck_chans` (256) channels, a LayerNorm
  over channels, a 3x3 convolution and another LayerNorm: the encoder's output is a
  (B, 256, 64, 64) map. It takes the place of the final LayerNorm.

Parameter names are timm's (`blocks.i.attn.rel_pos_h`, `neck.0.weight`, `neck.1.weight`, ...), so
timm's `samvit_*` state dicts load by name (the (1, rows, columns, D) position table flattened).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Attention
from .block import Block
from .rope import rope_coords, rope_sin_cos

NECK_EPS = 1e-6  # the LayerNorm2d eps of SAM's neck (timm's and transformers' default)


def window_partition(x: torch.Tensor, window: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, rows, columns, C) -> (B * windows, window * window, C) and the padded grid: the grid
    zero-padded at the bottom and right to multiples of `window`, windows in row-major order."""
    B, H, W, C = x.shape
    pad_h, pad_w = (window - H % window) % window, (window - W % window) % window
    x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))  # unconditionally: torch.fx cannot branch on a size
    Hp, Wp = H + pad_h, W + pad_w
    x = x.reshape(B, Hp // window, window, Wp // window, window, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, window * window, C), (Hp, Wp)


def window_unpartition(
    windows: torch.Tensor, window: int, padded: tuple[int, int], grid: tuple[int, int]
) -> torch.Tensor:
    """`window_partition` undone: (B * windows, window * window, C) -> (B, rows * columns, C),
    the padding cut away."""
    (Hp, Wp), (H, W) = padded, grid
    C = windows.shape[-1]
    x = windows.reshape(-1, Hp // window, Wp // window, window, window, C).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(-1, Hp, Wp, C)[:, :H, :W]
    return x.reshape(x.shape[0], H * W, C)


def window_weights_on_grid(
    weights: torch.Tensor, window: int, padded: tuple[int, int], grid: tuple[int, int]
) -> torch.Tensor:
    """Attention weights of windows, (B * windows, heads, n, n), as the (B, heads, N, N) matrix of
    the whole grid that `capture_attention` hands out: zero between tokens of different windows,
    the weights on padding left out (a row of a window that holds padding sums to less than 1)."""
    (Hp, Wp), (H, W) = padded, grid
    rows = torch.arange(Hp, device=weights.device)[:, None].expand(Hp, Wp)
    cols = torch.arange(Wp, device=weights.device)[None, :].expand(Hp, Wp)
    inside = (rows < H) & (cols < W)
    index = torch.where(inside, rows * W + cols, H * W)  # the padding all goes to one extra slot
    index, _ = window_partition(index[None, :, :, None], window)  # (windows, n, 1)
    n_windows, n = index.shape[0], index.shape[1]
    B, heads = weights.shape[0] // n_windows, weights.shape[1]
    full = weights.new_zeros(B, heads, H * W + 1, H * W + 1)
    full[:, :, index, index.transpose(1, 2)] = weights.reshape(B, n_windows, heads, n, n).transpose(1, 2)
    return full[:, :, : H * W, : H * W]


def sam_rel_pos_pairs(table: torch.Tensor, size: int) -> torch.Tensor:
    """(L, C) learned offsets -> (size, size, C), one embedding per (query, key) pair along an
    axis: entry [i, k] is the embedding of offset i - k (SAM's and timm's `get_rel_pos`). A table
    of another length than 2 * size - 1 is resized linearly along its offsets first
    (align_corners=False), as SAM's code does for another grid. Not BEiT's table
    (ViTConfig.rel_pos_table, layers/relpos_bias.py): one bias per head, not an embedding."""
    length = 2 * size - 1
    if table.shape[0] != length:
        resized = F.interpolate(table.t().unsqueeze(0).float(), size=length, mode="linear")
        table = resized[0].t().to(table.dtype)
    offsets = torch.arange(size, device=table.device)
    index = offsets[:, None] - offsets[None, :] + (size - 1)
    return table[index]


def decomposed_rel_pos_bias(
    q: torch.Tensor, rel_pos_h: torch.Tensor, rel_pos_w: torch.Tensor, grid: tuple[int, int]
) -> torch.Tensor:
    """The additive attention bias of decomposed relative positions (module docstring):
    q (B, heads, rows * columns, head_dim) -> (B, heads, N, N) with N = rows * columns."""
    B, heads, N, C = q.shape
    H, W = grid
    r_q = q.reshape(B, heads, H, W, C)
    rel_h = torch.einsum("bnhwc,hkc->bnhwk", r_q, sam_rel_pos_pairs(rel_pos_h, H))  # (.., H, W, key rows)
    rel_w = torch.einsum("bnhwc,wkc->bnhwk", r_q, sam_rel_pos_pairs(rel_pos_w, W))  # (.., H, W, key columns)
    bias = rel_h[..., :, None] + rel_w[..., None, :]  # (B, heads, H, W, key rows, key columns)
    return bias.reshape(B, heads, N, N)


# A leaf of torch.fx graphs: the table's resizing depends on the grid, which tracing cannot branch on.
torch.fx.wrap("decomposed_rel_pos_bias")


@torch.fx.wrap  # a leaf of torch.fx graphs: its device argument is a traced attribute there
def window_rope_embed(
    grid: tuple[int, int], span: int, head_dim: int, temperature: float, device: torch.device | None = None
) -> torch.Tensor:
    """SAM 3's rotary embedding [sin | cos] (rows * columns, 2 * head_dim) of a (rows, columns) `grid`
    (a window, or the whole grid of a global block; module docstring): the (column, row) patch
    indices times span / columns, in float32, the factor a Python float as transformers computes
    it (i / columns * span rounds differently in the last bit); frequencies
    1 / temperature ** (2i / (head_dim / 2)), i < head_dim / 4, per axis; interleaved pairs."""
    scale = span / grid[1]
    coords = rope_coords(grid, indexing="xy", device=device).flatten(0, 1) * scale  # (N, 2): column, row
    half = head_dim // 2
    bands = 1.0 / (temperature ** (torch.arange(0, half, 2, dtype=torch.float32, device=device) / half))
    angles = (coords[..., None] * bands).flatten(-2)  # (N, head_dim / 2): the columns' angles, then the rows'
    return rope_sin_cos(angles, rotate_half=False)


class RelPosAttention(Attention):
    """Multi-head attention with decomposed relative positions for a `grid` of tokens (a window,
    or the whole grid of a global block): `rel_pos_h` and `rel_pos_w` beside the projections."""

    def __init__(self, *, dim: int, num_heads: int, grid: tuple[int, int], **options: Any) -> None:
        super().__init__(dim=dim, num_heads=num_heads, **options)
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * grid[0] - 1, self.head_dim))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * grid[1] - 1, self.head_dim))

    def forward(
        self,
        x: torch.Tensor,
        rope: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
        grid: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """x (B, rows * columns, D) of a (rows, columns) `grid`; no rotary embedding (SAM has none)."""
        if grid is None or rope is not None:
            raise ValueError(
                "RelPosAttention needs the (rows, columns) grid of its tokens and takes no rotary embedding"
            )
        q, k, v = self._project(x)
        bias = decomposed_rel_pos_bias(q, self.rel_pos_h, self.rel_pos_w, grid)
        return self._attend(q, k, v, attn_mask, bias if attn_bias is None else bias + attn_bias)


class SamBlock(Block):
    """The pre-norm block of SAM's encoder: its attention within windows of `window_size` tokens
    (0: over the whole grid), with decomposed relative positions when `use_rel_pos` (timm's name; sized for the
    window, or for `grid`, the model's grid of patches, in a global block), or SAM 3's rotary positions when
    `rope_temperature` is given (`window_rope_embed`, its positions spanning `rope_span` patches)."""

    def __init__(
        self,
        *,
        window_size: int,
        use_rel_pos: bool,
        grid: tuple[int, int],
        rope_temperature: float | None = None,
        rope_span: int = 0,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.window_size = window_size
        if rope_temperature is not None and (use_rel_pos or rope_span <= 0):
            raise ValueError(
                f"SamBlock: rope_temperature={rope_temperature!r} with use_rel_pos={use_rel_pos!r}, "
                f"rope_span={rope_span!r}; expected SAM 3's rotary positions without relative tables, "
                "spanning a window of > 0 patches"
            )
        self.rope_temperature, self.rope_span = rope_temperature, rope_span
        if use_rel_pos:  # the same projections, with the two tables beside them
            self.attn = RelPosAttention(
                dim=options["dim"],
                num_heads=options["num_heads"],
                grid=(window_size, window_size) if window_size else grid,
                qkv_bias=options.get("qkv_bias", True),
                attn_drop=options.get("attn_drop", 0.0),
                proj_drop=options.get("drop", 0.0),
            )

    def forward(
        self,
        x: torch.Tensor,
        rope: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
        grid: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """x (B, rows * columns, D) of the (rows, columns) `grid` of patches."""
        if grid is None or rope is not None or attn_mask is not None or attn_bias is not None:
            raise ValueError(
                "SamBlock needs the (rows, columns) grid of its patch tokens and takes no rotary embedding, mask "
                "or shared attention bias"
            )
        y = self.norm1(x)
        ws = self.window_size
        if ws:
            y, padded = window_partition(y.reshape(y.shape[0], grid[0], grid[1], y.shape[-1]), ws)
        y = self._attention(y, (ws, ws) if ws else grid)
        if ws:
            y = window_unpartition(y, ws, padded, grid)
            sink = self.attn.attn_sink
            if sink:  # capture_attention: the windows' weights as one (B, heads, N, N) matrix
                sink[-1] = window_weights_on_grid(sink[-1], ws, padded, grid)
        x = x + self.drop_path1(self.ls1(y))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))

    def _attention(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        if isinstance(self.attn, RelPosAttention):
            return self.attn(x, grid=grid)
        if self.rope_temperature is not None:  # SAM 3: the positions of what this block attends over
            rope = window_rope_embed(grid, self.rope_span, self.attn.head_dim, self.rope_temperature, x.device)
            return self.attn(x, rope=rope)
        return self.attn(x)


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of a (B, C, H, W) map (timm's LayerNorm2d)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Neck(nn.Sequential):
    """SAM's neck: Conv1x1(D -> C, no bias), LayerNorm2d, Conv3x3(C -> C, padding 1, no bias),
    LayerNorm2d (timm's `neck.0` .. `neck.3`)."""

    def __init__(self, dim: int, chans: int) -> None:
        super().__init__(
            nn.Conv2d(dim, chans, kernel_size=1, bias=False),
            LayerNorm2d(chans, eps=NECK_EPS),
            nn.Conv2d(chans, chans, kernel_size=3, padding=1, bias=False),
            LayerNorm2d(chans, eps=NECK_EPS),
        )

    def tokens(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """(B, rows * columns, D) tokens of a (rows, columns) grid -> (B, rows * columns, C)."""
        B, _, D = x.shape
        y = self(x.transpose(1, 2).reshape(B, D, grid[0], grid[1]))
        return y.flatten(2).transpose(1, 2)


def neck_params(dim: int, chans: int) -> int:
    """The parameter count of `Neck(dim, chans)`."""
    return dim * chans + 2 * chans + 9 * chans * chans + 2 * chans


def sam_rel_pos_params(grid: tuple[int, int], head_dim: int) -> int:
    """The parameter count of a RelPosAttention's two tables for a (rows, columns) grid (SAM's
    decomposed positions; BEiT's table is counted by the model)."""
    return (2 * grid[0] - 1 + 2 * grid[1] - 1) * head_dim
