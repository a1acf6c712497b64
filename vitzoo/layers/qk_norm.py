"""QK-norm (Dehghani et al., "Scaling Vision Transformers to 22 Billion Parameters", 2023): the
queries and keys are normalised before their dot products,

    scores = norm_q(q) norm_k(k)^T / sqrt(head_dim),

which bounds the attention logits and keeps large models from the loss spikes that growing logits
cause. Each norm is the model's norm (`ViTConfig.norm_layer`: LayerNorm or RMSNorm, `norm_eps`)
with its own learned scale, applied before the rotary embedding. Two scopes
(`ViTConfig.qk_norm`):

    "head"   over each head's head_dim channels, one (head_dim,) scale shared by the heads:
             ViT-22B, timm's `qk_norm=True` (Attention, AttentionRope), Sapiens2
    "full"   over all heads' D channels at once, before the split into heads, one (D,) scale:
             InternViT-6B's `qk_normalization`

With grouped-query attention (gqa.py) the key norm runs on the key/value heads before they are
repeated for their groups. Parameter names are timm's: `attn.q_norm.weight`, `attn.k_norm.weight`
(and `.bias` with LayerNorm). Element-wise: no FLOPs in vitzoo's count (flops.py).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import nn

from .norm import make_norm

QKNormName = Literal["", "head", "full"]
QK_NORMS: tuple[str, ...] = get_args(QKNormName)


def make_qk_norm(scope: str, norm_layer: str, head_dim: int, num_heads: int, eps: float) -> nn.Module:
    """The norm of q (or of k) for `scope` "head" (over head_dim) or "full" (over all heads' channels)."""
    if scope not in ("head", "full"):
        raise ValueError(f"qk_norm={scope!r} is invalid; expected one of {', '.join(map(repr, QK_NORMS))}")
    return make_norm(norm_layer, head_dim if scope == "head" else head_dim * num_heads, eps)


def apply_qk_norm(norm: nn.Module, x: torch.Tensor, scope: str) -> torch.Tensor:
    """(B, heads, N, head_dim) -> the same shape, normalised by `norm` over `scope`."""
    if scope == "head":
        return norm(x)
    B, H, N, hd = x.shape
    flat = norm(x.transpose(1, 2).reshape(B, N, H * hd))
    return flat.reshape(B, N, H, hd).transpose(1, 2)
