"""How much compute one forward pass costs: FLOPs of a ViT at its input size.

Convention (the same as `torch.utils.flop_counter.FlopCounterMode`): only matrix products count,
and one multiply-add is 2 FLOPs. Element-wise work (LayerNorm, GELU, softmax, bias adds, residuals,
LayerScale, the rotary embedding, BEiT's relative position bias) is left out — it is a few percent of a ViT and depends on kernels rather than on the architecture.
So a number here is twice the "GMACs" that some tables quote: ViT-B/16 at 224 is 35.1 GFLOPs =
17.6 GMACs.

For a `ViTConfig` the count is a closed formula (`vit_flops`), which needs no model at all.
For any other module (a plugin's builder may return anything) `measure_flops` runs one forward
pass on the "meta" device under FlopCounterMode: shapes only, no memory, no arithmetic.
`count_flops` is that counter, with the fused attention kernels it misses on some torch versions
(the CPU flash-attention op of `scaled_dot_product_attention`) counted by their shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .layers import to_2tuple
from .layers.hybrid_embed import hybrid_flops
from .layers.swiglu import mlp_hidden_dim
from .model import ViTConfig


@dataclass(frozen=True)
class FlopBreakdown:
    """FLOPs of one image through a ViT, by part (all multiply-adds counted as 2)."""

    patch_embed: int
    qkv_proj: int  # the fused q, k, v projection and the output projection
    attention: int  # q @ k^T and attn @ v
    mlp: int
    head: int  # representation layer and classifier(s)
    pool: int = 0  # attention pooling ("map"): its query, key/value and output projections, attention, MLP
    neck: int = 0  # SAM's convolutional neck (its 1x1 and 3x3 convolutions)
    rel_pos: int = 0  # the relative position bias MLPs over the grid's offsets (rel_pos_mlp)

    @property
    def total(self) -> int:
        parts = (self.patch_embed, self.qkv_proj, self.attention, self.mlp, self.head, self.pool, self.neck)
        return sum(parts) + self.rel_pos


def vit_flops(config: ViTConfig) -> FlopBreakdown:
    """FLOPs of one image of `config.img_size` through a VisionTransformer built from `config`."""
    (h, w), (ph, pw) = to_2tuple(config.img_size), to_2tuple(config.patch_size)
    gh, gw = config.grid_size
    num_patches = gh * gw
    tokens = num_patches + config.num_prefix_tokens
    d = config.embed_dim
    hidden = int(d * (config.attn_pool_mlp_ratio or config.mlp_ratio))  # the "map" pool's plain Mlp width
    block_hidden = mlp_hidden_dim(config.mlp_layer, d, config.mlp_ratio, config.mlp_align)
    # a gated MLP (SwiGLU) has two input projections (gate and input) of the hidden width
    block_fc1 = (2 if config.mlp_layer != "mlp" else 1) * d * block_hidden

    if config.hybrid_stem:  # a CNN stem's convolutions (layers/hybrid_embed.py)
        patch_embed = hybrid_flops(config.hybrid_stem, config.hybrid_layers, config.in_chans, d, ph, h, w)
    elif config.conv_stem:
        # Every 3x3 stride-2 conv (padding 1) maps a (h, w) map to (ceil(h/2), ceil(w/2)) positions,
        # each a (c_in * 9 -> c_out) linear map; the last one projects to D.
        patch_embed, c_in = 0, config.in_chans
        for c_out in (*config.conv_stem, d):
            h, w = -(-h // 2), -(-w // 2)
            patch_embed += 2 * h * w * c_in * 9 * c_out
            c_in = c_out
    else:  # the patch conv is one (C*ph*pw -> D) linear map per patch
        patch_embed = 2 * num_patches * config.in_chans * ph * pw * d
    # Per block: qkv (D -> 3D) and proj (D -> D) on every token; q k^T and attn v are each
    # (tokens x tokens x D) multiply-adds summed over heads; fc1 (D -> hidden) and fc2 back.
    # Grouped-query attention: k and v are (D -> kv heads * head_dim) each; the attention itself
    # repeats them for every query head, so its count is unchanged (qk-norm: element-wise).
    kv_widths = [d // config.num_heads * heads for heads in config.kv_heads]
    qkv_proj = sum(2 * tokens * d * (d + 2 * kv + d) for kv in kv_widths)
    # Differential attention (attn_layer="diff") multiplies its two maps (half-width q, k) by all of v
    # each: q k^T costs the same, attn v twice. The parallel block's fused projections are the same products.
    attention = config.depth * 2 * ((3 if config.attn_layer == "diff" else 2) * tokens * tokens * d)
    if config.window_size or config.rel_pos:
        qkv_proj, attention = _sam_attention_flops(config)
    mlp = config.depth * 2 * tokens * (block_fc1 + block_hidden * d)
    pool = 0
    if config.global_pool == "map":
        # One learned query attends over the patch tokens (every token with pool_include_prefix):
        # q (D -> D) on the query, k and v (D -> 2D) on each of them, q k^T and attn v, the output
        # projection, then the MLP.
        keys = tokens if config.pool_include_prefix else tokens - config.num_prefix_tokens
        pool = 2 * d * d + 2 * keys * d * 2 * d + 2 * (2 * keys * d) + 2 * d * d + 2 * (d * hidden + hidden * d)
    # The head sees one pooled feature per classifier (two with a distillation token), or every
    # token without pooling.
    heads = tokens if config.global_pool == "" else 2 if config.distilled else 1
    rep = config.representation_size
    head = 0
    if rep:
        head += heads * 2 * d * rep
    if config.num_classes > 0:
        head += heads * 2 * (rep or config.neck_chans or d) * config.num_classes
    c = config.neck_chans  # SAM's neck: a 1x1 (D -> C) and a 3x3 (C -> C) convolution at every patch
    neck = 2 * num_patches * (d * c + 9 * c * c)
    return FlopBreakdown(
        patch_embed=patch_embed,
        qkv_proj=qkv_proj,
        attention=attention,
        mlp=mlp,
        head=head,
        pool=pool,
        neck=neck,
        rel_pos=_rel_pos_mlp_flops(config),
    )


def _rel_pos_mlp_flops(config: ViTConfig) -> int:
    """The bias MLP (2 -> rel_pos_mlp -> heads) on each of the (2 rows - 1)(2 cols - 1) offsets of
    the grid, once if shared, else in every block; the gather and the bias add are element-wise."""
    if not config.rel_pos_mlp:
        return 0
    gh, gw = config.grid_size
    offsets = (2 * gh - 1) * (2 * gw - 1)
    mlps = 1 if config.rel_pos_mlp_shared else config.depth
    return mlps * 2 * offsets * (2 * config.rel_pos_mlp + config.rel_pos_mlp * config.num_heads)


def _sam_attention_flops(config: ViTConfig) -> tuple[int, int]:
    """(projections, attention) of SAM's blocks (layers/sam.py): a windowed block projects and attends
    over its windows, the grid padded to whole windows; with rel_pos each query also meets the
    relative-position rows of its window's (or grid's) rows and columns (two products, q . table)."""
    gh, gw = config.grid_size
    d, ws = config.embed_dim, config.window_size
    qkv_proj = attention = 0
    for i in range(config.depth):
        if ws and i not in config.global_attn_indexes:
            rows, cols = ws, ws
            tokens = -(-gh // ws) * ws * -(-gw // ws) * ws
        else:
            rows, cols, tokens = gh, gw, gh * gw
        qkv_proj += 2 * tokens * d * 4 * d
        attention += 2 * (2 * tokens * rows * cols * d)
        if config.rel_pos:
            attention += 2 * tokens * (rows + cols) * d
    return qkv_proj, attention


def _shape(x: Any) -> tuple[int, ...]:
    # FlopCounterMode hands custom formulas shapes on newer torch and tensors on older ones.
    return tuple(x.shape) if isinstance(x, torch.Tensor) else tuple(x)


def _sdpa_flops(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
    """q k^T and attn v of scaled_dot_product_attention: (B, heads, Nq, d) x (B, heads, Nk, d)."""
    *batch, nq, d = _shape(query)
    nk, dv = _shape(key)[-2], _shape(value)[-1]
    b = math.prod(batch)
    return 2 * b * nq * nk * d + 2 * b * nq * nk * dv


def _attention_ops_missing_from_counter() -> dict[Any, Callable[..., int]]:
    """Fused attention ops that this torch's FlopCounterMode does not count, with a formula each.
    torch's counter knows the CUDA flash / efficient kernels but not (on every version) the CPU
    flash kernel that scaled_dot_product_attention dispatches to on the CPU."""
    from torch.utils import flop_counter

    # torch < 2.2 names the table flop_mapping
    names = vars(flop_counter)
    flop_registry = names.get("flop_registry") or names["flop_mapping"]

    missing: dict[Any, Callable[..., int]] = {}
    for name in ("_scaled_dot_product_flash_attention_for_cpu",):
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue  # this torch has no such op
        if packet not in flop_registry and packet.default not in flop_registry:
            missing[packet] = _sdpa_flops
    return missing


def count_flops(module: nn.Module, *inputs: torch.Tensor) -> int:
    """FLOPs of `module(*inputs)` as FlopCounterMode counts them (matrix products, a multiply-add
    as 2), including fused attention kernels that the installed torch's counter leaves out. Runs
    the forward pass in eval mode without gradients, on whatever device the module and inputs are."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=_attention_ops_missing_from_counter()) as counter:
        with torch.no_grad():
            module.eval()(*inputs)
    return int(counter.get_total_flops())


def measure_flops(model: nn.Module, input_size: tuple[int, int, int]) -> int:
    """FLOPs of one (C, H, W) input through any module, counted by `count_flops`.

    The module is copied to the "meta" device first, so nothing is computed and no memory is used;
    it must be one whose forward works on meta tensors (everything built from torch ops does)."""
    meta_model = model.to("meta") if _on_meta(model) else _meta_copy(model)
    return count_flops(meta_model, torch.empty(1, *input_size, device="meta"))


def _on_meta(model: nn.Module) -> bool:
    return all(t.device.type == "meta" for t in [*model.parameters(), *model.buffers()])


def _meta_copy(model: nn.Module) -> nn.Module:
    import copy

    # Deep-copying then moving keeps the caller's model untouched on its own device.
    return copy.deepcopy(model).to("meta")


def model_flops(model: nn.Module) -> int:
    """FLOPs of one image at the model's own input size: the formula for a VisionTransformer,
    a meta-device measurement for anything else (which then needs `model.pretrained_cfg`)."""
    config = getattr(model, "config", None)
    if isinstance(config, ViTConfig):
        return vit_flops(config).total
    cfg = getattr(model, "pretrained_cfg", None)
    input_size = getattr(cfg, "input_size", None)
    if input_size is None:
        raise ValueError(
            f"cannot tell the input size of {type(model).__name__}: it has no ViTConfig `config` and no "
            "`pretrained_cfg.input_size`; call measure_flops(model, (C, H, W)) with the size instead"
        )
    return measure_flops(model, tuple(input_size))
