"""2D rotary position embedding (RoPE) of the patch tokens, in the variants pretrained ViTs use.

RoPE rotates each pair of channels of q and k by an angle proportional to the token's position,
so q.k depends on the offset between two patches. The head's channels are split between the
row and the column axis. Three variants, each numerically timm's (timm/layers/pos_embed_sincos.py):

    kind     positions                                frequencies                         used by
    "cat"    patch indices (+ offset), optionally     1 / temperature ** (i / (head_dim/4)) EVA-02, PE (with an
             rescaled to `ref_feat_shape` (EVA)                                             absolute table beside
                                                                                           it), RoPE-ViT axial
    "mixed"  patch indices                            learned per block and head (2, depth, RoPE-ViT mixed
                                                      heads, head_dim/2), `rope.freqs`
    "dinov3" patch centres normalised to [-1, 1]      periods temperature ** (2i / (head_dim/2)) DINOv3
             ("separate": each axis by its length;    or min_period..max_period, geometric;
             "min"/"max": both by the shorter/longer) angle = 2 pi coord / period

`grid_indexing="xy"` orders the coordinate channels (column, row) instead of (row, column);
`rotate_half` pairs channel i with i + head_dim/2 instead of the interleaved pairs (2i, 2i+1).
Training-time coordinate augmentation (DINOv3's shift / jitter / rescale, any kind) draws one
transform per forward in training mode only; in eval the embedding is deterministic.

API (what vitzoo/model/ and vitzoo/layers/attention.py use):

    rope = RotaryEmbedding2d("cat", head_dim=64, num_heads=12, depth=12, grid=(14, 14),
                             num_prefix_tokens=1, temperature=10000.0, ...)
    embed = rope.get_embed()            # the model's own grid: a cached buffer
    embed = rope.get_embed((20, 24))    # another grid (dynamic_img_size): computed now
    rope.set_grid((20, 24))             # set_input_size: the cache follows
    q = apply_rope(q, rope.for_block(embed, i), rotate_half=rope.rotate_half)   # (B, heads, N, head_dim)

An embedding is [sin | cos] on its last axis, (prefix + N, 2 * head_dim) for "cat" and "dinov3",
(depth, heads, prefix + N, 2 * head_dim) for "mixed". Its first `num_prefix_tokens` rows are the
identity rotation (sin 0, cos 1): class and register tokens are not rotated, exactly, and the
attention applies one embedding to the whole sequence. Positions and angles are computed in
float32; the cached embedding follows the model's dtype (as timm's buffers do), one computed for
another grid stays float32 and the rotation is cast back to q's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

RopeKind = Literal["cat", "mixed", "dinov3"]
ROPE_KINDS: tuple[str, ...] = get_args(RopeKind)
GridIndexing = Literal["ij", "xy"]
GRID_INDEXINGS: tuple[str, ...] = get_args(GridIndexing)
NormalizeCoords = Literal["separate", "min", "max"]
NORMALIZE_COORDS: tuple[str, ...] = get_args(NormalizeCoords)


def rope_coords(
    grid: tuple[int, int],
    *,
    centered: bool = False,
    indexing: str = "ij",
    offset: float = 0.0,
    ref_feat_shape: tuple[int, int] | None = None,
    normalize: str = "separate",
    device: torch.device | None = None,
) -> torch.Tensor:
    """(rows, cols, 2) float32 positions of a grid's patches, row-major; the channels are (row, col)
    for "ij" and (col, row) for "xy". Patch indices (+ offset), rescaled so that `grid` spans
    `ref_feat_shape` when given (EVA's fine-tuning at another size); or with `centered`, DINOv3's
    patch centres (i + 0.5 + offset) / length mapped to [-1, 1]."""
    shape, ref = list(grid), list(ref_feat_shape) if ref_feat_shape is not None else None
    if indexing == "xy":
        shape = shape[::-1]
        ref = ref[::-1] if ref is not None else None
    if centered:
        denom = {"max": [max(shape)] * 2, "min": [min(shape)] * 2}.get(normalize, shape)
        axes = [(torch.arange(0.5, s, device=device, dtype=torch.float32) + offset) / d for s, d in zip(shape, denom)]
    else:
        axes = [torch.arange(s, device=device, dtype=torch.int64).to(torch.float32) + offset for s in shape]
    if ref is not None:
        axes = [t / s * r for t, s, r in zip(axes, shape, ref)]
    coords = torch.stack(torch.meshgrid(axes, indexing=indexing), dim=-1)
    return 2.0 * coords - 1.0 if centered else coords


@torch.fx.wrap
def rope_coords_for_image(
    image_size: Sequence[int], patch_size: tuple[int, int], device: torch.device | None, settings: dict[str, Any]
) -> torch.Tensor:
    """(N, 2) positions of the patches of an (H, W) image (sides rounded up to whole patches, as
    the patch embedding pads), `settings` being `rope_coords`' keywords. A leaf of torch.fx graphs."""
    grid = (-(-image_size[0] // patch_size[0]), -(-image_size[1] // patch_size[1]))
    return rope_coords(grid, device=device, **settings).flatten(0, 1)


def augment_coords(
    coords: torch.Tensor, shift: float | None, jitter: float | None, rescale: float | None
) -> torch.Tensor:
    """DINOv3's training augmentation of the positions (..., 2), one transform for all of them, in
    its order and random draws: a shift per axis uniform in [-shift, shift], a scale per axis
    log-uniform in [1/jitter, jitter], one shared scale log-uniform in [1/rescale, rescale]."""
    axes = coords.shape[-1]
    device, dtype = coords.device, coords.dtype
    if shift is not None:
        coords = coords + torch.empty(axes, device=device, dtype=dtype).uniform_(-shift, shift)
    if jitter is not None:
        limit = math.log(jitter)
        coords = coords * torch.empty(axes, device=device, dtype=dtype).uniform_(-limit, limit).exp()
    if rescale is not None:
        limit = math.log(rescale)
        coords = coords * torch.empty(1, device=device, dtype=dtype).uniform_(-limit, limit).exp()
    return coords


def init_mixed_freqs(head_dim: int, depth: int, num_heads: int, temperature: float) -> torch.Tensor:
    """RoPE-Mixed's initial frequencies (2, depth, heads, head_dim / 2): the axial magnitudes turned
    by a random angle per block and head (one torch.rand draw of (depth, heads, 1))."""
    mag = 1.0 / (temperature ** (torch.arange(0, head_dim, 4, dtype=torch.float32) / head_dim))
    angles = torch.rand(depth, num_heads, 1) * 2 * torch.pi
    fx = torch.cat([mag * torch.cos(angles), mag * torch.cos(angles + torch.pi / 2)], dim=-1)
    fy = torch.cat([mag * torch.sin(angles), mag * torch.sin(angles + torch.pi / 2)], dim=-1)
    return torch.stack([fx, fy], dim=0)


def _layout(x: torch.Tensor, rotate_half: bool) -> torch.Tensor:
    """Per-pair values (..., head_dim / 2) -> (..., head_dim): [a, a] halves, or interleaved pairs."""
    return torch.cat([x, x], dim=-1) if rotate_half else x.repeat_interleave(2, -1)


def _sin_cos(angles: torch.Tensor, rotate_half: bool, prefix: int) -> torch.Tensor:
    """Angles (..., N, head_dim / 2) -> [sin | cos] (..., prefix + N, 2 * head_dim), the prefix rows
    the identity rotation."""
    sin, cos = _layout(angles.sin(), rotate_half), _layout(angles.cos(), rotate_half)
    if prefix:  # rows in front on the token axis: sin 0, cos 1
        sin = F.pad(sin, (0, 0, prefix, 0), value=0.0)
        cos = F.pad(cos, (0, 0, prefix, 0), value=1.0)
    return torch.cat([sin, cos], dim=-1)


def rope_sin_cos(angles: torch.Tensor, rotate_half: bool) -> torch.Tensor:
    """Angles (..., N, head_dim / 2) -> the [sin | cos] embedding (..., N, 2 * head_dim) that
    `apply_rope` takes, without prefix rows (SAM 3's windows: layers/sam.py)."""
    return _sin_cos(angles, rotate_half, 0)


def rotate_pairs(x: torch.Tensor, rotate_half: bool) -> torch.Tensor:
    """The 90-degree turn of each channel pair: (-x2, x1) for halves, (-x_{2i+1}, x_{2i}) interleaved."""
    if rotate_half:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)
    return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)


def apply_rope(x: torch.Tensor, embed: torch.Tensor, rotate_half: bool = False) -> torch.Tensor:
    """Rotate (B, heads, N, head_dim) queries or keys by an embedding [sin | cos] of N rows
    (broadcast over batch and heads); the result in x's dtype."""
    sin, cos = embed.chunk(2, dim=-1)
    return (x * cos + rotate_pairs(x, rotate_half) * sin).to(x.dtype)


class RotaryEmbedding2d(nn.Module):
    """The rotary embedding of one model (see the module docstring). Holds no parameter except
    "mixed"'s learned `freqs`; the embedding of the model's own grid is a non-persistent buffer."""

    embed: torch.Tensor | None  # None for "mixed", whose embedding is computed from `freqs` each call

    def __init__(
        self,
        kind: str,
        *,
        head_dim: int,
        num_heads: int,
        depth: int,
        grid: tuple[int, int],
        num_prefix_tokens: int = 0,
        temperature: float = 10000.0,
        grid_indexing: str = "ij",
        grid_offset: float = 0.0,
        ref_feat_shape: tuple[int, int] | None = None,
        rotate_half: bool = False,
        min_period: float | None = None,
        max_period: float | None = None,
        normalize_coords: str = "separate",
        shift_coords: float | None = None,
        jitter_coords: float | None = None,
        rescale_coords: float | None = None,
    ) -> None:
        super().__init__()
        check_rope_args(kind, head_dim, rotate_half, grid_indexing, normalize_coords)
        self.kind, self.head_dim, self.num_prefix_tokens = kind, head_dim, num_prefix_tokens
        self.temperature, self.rotate_half = float(temperature), rotate_half
        self.grid_indexing, self.grid_offset, self.ref_feat_shape = grid_indexing, grid_offset, ref_feat_shape
        self.min_period, self.max_period, self.normalize_coords = min_period, max_period, normalize_coords
        self.augment = (shift_coords, jitter_coords, rescale_coords)
        self.grid: tuple[int, int] = (grid[0], grid[1])
        if kind == "mixed":
            self.freqs = nn.Parameter(init_mixed_freqs(head_dim, depth, num_heads, self.temperature))
        self.register_buffer("embed", None, persistent=False)
        if kind != "mixed":
            self.embed = self._cached_embed()

    # ------------------------------------------------------------------ frequencies and angles
    def bands(self, device: torch.device | None = None) -> torch.Tensor:
        """(head_dim / 4,) float32: "cat"'s angular frequencies, "dinov3"'s periods."""
        n = self.head_dim // 4
        if self.kind == "dinov3":
            if self.min_period is not None and self.max_period is not None:
                exponents = torch.linspace(0, 1, n, dtype=torch.float32, device=device)
                return self.min_period * ((self.max_period / self.min_period) ** exponents)
            exponents = 2.0 * torch.arange(n, dtype=torch.float32, device=device) / (self.head_dim // 2)
            return self.temperature**exponents
        indices = torch.arange(0, n, 1, dtype=torch.int64, device=device).to(torch.float32)
        return 1.0 / (self.temperature ** (indices / n))

    def coords(self, grid: tuple[int, int]) -> torch.Tensor:
        """(N, 2) float32 positions of `grid`'s patches, on the model's device."""
        coords = rope_coords(grid, **self._coord_settings()).flatten(0, 1)
        device = self._device()  # a proxy while torch.fx traces: moved there, not made there
        return coords if device is None else coords.to(device)

    def _coord_settings(self) -> dict[str, Any]:
        return {
            "centered": self.kind == "dinov3",
            "indexing": self.grid_indexing,
            "offset": 0.0 if self.kind == "mixed" else self.grid_offset,
            "ref_feat_shape": self.ref_feat_shape if self.kind == "cat" else None,
            "normalize": self.normalize_coords,
        }

    def _device(self) -> torch.device | None:
        """Where positions are computed: with the frequencies or the cached embedding (None while
        building: torch's default device, the meta device for a model built to be loaded)."""
        if self.kind == "mixed":
            return self.freqs.device
        return None if self.embed is None else self.embed.device

    def from_coords(self, coords: torch.Tensor, batched: bool = False) -> torch.Tensor:
        """The [sin | cos] embedding of (N, 2) positions, augmented while training with coordinate
        augmentation: (prefix + N, 2 * head_dim) float32, "mixed" (depth, heads, prefix + N,
        2 * head_dim) in its frequencies' dtype. `batched`: (B, N, 2) positions, each image's own
        (patch-sequence batches, naflex.py), a B axis after "mixed"'s depth or in front."""
        if self.augmenting:
            coords = augment_coords(coords, *self.augment)
        if self.kind == "mixed":
            # angles (depth, [B,] heads, N, head_dim / 2)
            freqs = self.freqs.float()
            if not batched:
                angles = coords[:, 0, None] * freqs[0].unsqueeze(-2) + coords[:, 1, None] * freqs[1].unsqueeze(-2)
            else:
                f0, f1 = freqs[0][:, None, :, None], freqs[1][:, None, :, None]
                angles = coords[None, :, None, :, 0, None] * f0 + coords[None, :, None, :, 1, None] * f1
            return _sin_cos(angles, self.rotate_half, self.num_prefix_tokens).to(self.freqs.dtype)
        bands = self.bands().to(coords.device)  # made where the device is known, also while tracing
        if self.kind == "dinov3":
            angles = (2 * math.pi * coords[..., None] / bands).flatten(-2)
        else:
            angles = (coords[..., None] * bands).flatten(-2)
        return _sin_cos(angles, self.rotate_half, self.num_prefix_tokens)

    # ------------------------------------------------------------------ what the model calls
    @property
    def augmenting(self) -> bool:
        return self.training and any(a is not None for a in self.augment)

    def get_embed(self, grid: tuple[int, int] | None = None) -> torch.Tensor:
        """The embedding of `grid` (rows, cols of patches), computed now; without a grid, the model's
        own: the cached buffer, except for "mixed" (its frequencies train) and while augmenting."""
        if grid is None and self.embed is not None and not self.augmenting:
            return self.embed
        return self.from_coords(self.coords(self.grid if grid is None else (grid[0], grid[1])))

    def embed_for_image(self, image_size: Sequence[int], patch_size: tuple[int, int]) -> torch.Tensor:
        """`dynamic_img_size`: the embedding of an image of `image_size` (H, W), computed every call.
        The positions come from a leaf of torch.fx graphs, so a traced model follows the input's
        size; the sizes stay symbolic under torch.export (ONNX with dynamic height and width)."""
        coords = rope_coords_for_image(image_size, patch_size, self._device(), self._coord_settings())
        return self.from_coords(coords)

    def for_block(self, embed: torch.Tensor, index: int) -> torch.Tensor:
        """The part of `embed` that block `index` uses: its own for "mixed", the whole one otherwise."""
        return embed[index] if self.kind == "mixed" else embed

    def set_grid(self, grid: tuple[int, int]) -> None:
        """`set_input_size`: the model's grid changes for good, the cached embedding follows."""
        self.grid = (grid[0], grid[1])
        if self.embed is not None:
            with torch.no_grad():
                self.embed = self._cached_embed().to(self.embed.dtype)

    def _cached_embed(self) -> torch.Tensor:
        """The embedding of the model's own grid, never augmented."""
        coords = self.coords(self.grid)
        training, self.training = self.training, False
        try:
            return self.from_coords(coords)
        finally:
            self.training = training

    def init_non_persistent_buffers(self) -> None:
        """Recompute the cached embedding, on the CPU if it is on the meta device (timm's name;
        vitzoo/weights/load.py calls it once a model built on the meta device has its weights)."""
        if self.embed is not None:
            with torch.no_grad():
                if self.embed.is_meta:
                    self.embed = torch.empty(self.embed.shape, dtype=self.embed.dtype, device="cpu")
                self.embed = self._cached_embed().to(self.embed.dtype)

    def no_weight_decay(self) -> set[str]:
        return {"freqs"} if self.kind == "mixed" else set()

    def extra_repr(self) -> str:
        return f"{self.kind}, head_dim={self.head_dim}, grid={self.grid}, temperature={self.temperature:g}"


def check_rope_args(
    kind: str, head_dim: int, rotate_half: bool, grid_indexing: str, normalize_coords: str, *, optional: bool = False
) -> None:
    """The combinations RotaryEmbedding2d cannot build, each one clear ValueError; the one home of
    these rules (ViTConfig's rope fields are checked here too). `optional`: kind "" (no rotary
    embedding, the config's default) is valid as well, its layout fields still checked."""
    if kind not in ROPE_KINDS and not (optional and kind == ""):
        expected = ("'' (none) or " if optional else "") + "one of " + ", ".join(map(repr, ROPE_KINDS))
        raise ValueError(f"rope={kind!r} is invalid; expected {expected}")
    if grid_indexing not in GRID_INDEXINGS:
        raise ValueError(f"rope_grid_indexing={grid_indexing!r} is invalid; expected 'ij' or 'xy'")
    if normalize_coords not in NORMALIZE_COORDS:
        raise ValueError(
            f"rope_normalize_coords={normalize_coords!r} is invalid; expected one of "
            + ", ".join(map(repr, NORMALIZE_COORDS))
        )
    if not kind:
        return
    if head_dim % 4:
        raise ValueError(
            f"rope={kind!r} needs a head width (embed_dim / num_heads) divisible by 4, got {head_dim}; "
            "expected embed_dim and num_heads that give one"
        )
    if kind == "mixed" and rotate_half:
        raise ValueError("rope='mixed' cannot be combined with rope_rotate_half=True; expected rope_rotate_half=False")
