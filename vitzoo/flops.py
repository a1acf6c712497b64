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

from .model import PARTS, ViTConfig
from .model.part import FLOP_KINDS


@dataclass(frozen=True)
class FlopBreakdown:
    """FLOPs of one image through a ViT, by part (all multiply-adds counted as 2)."""

    patch_embed: int
    qkv_proj: int  # the fused q, k, v projection and the output projection
    attention: int  # q @ k^T and attn @ v
    mlp: int
    head: int  # representation layer and classifier(s)
    pool: int = 0  # attention pooling ("map", "coca"): its queries', key/value and output projections, attention, MLP
    neck: int = 0  # SAM's convolutional neck (its 1x1 and 3x3 convolutions)
    rel_pos: int = 0  # the relative position bias MLPs over the grid's offsets (rel_pos_mlp)

    @property
    def total(self) -> int:
        parts = (self.patch_embed, self.qkv_proj, self.attention, self.mlp, self.head, self.pool, self.neck)
        return sum(parts) + self.rel_pos


def vit_flops(config: ViTConfig) -> FlopBreakdown:
    """FLOPs of one image of `config.img_size` through a VisionTransformer built from `config`: the
    sum of its parts' counts (vitzoo/model/part.py), each part's formula beside its fields."""
    counts = dict.fromkeys(FLOP_KINDS, 0)
    for part in PARTS:
        for kind, flops in part.flops(config).items():
            counts[kind] += flops
    return FlopBreakdown(**counts)


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
