"""Grouped-query attention (Ainslie et al., "GQA: Training Generalized Multi-Query Transformer
Models from Multi-Head Checkpoints", 2023): fewer key/value heads than query heads.

The h query heads are split into g = h / h_kv groups of consecutive heads; the heads of group j
share key/value head j:

    q_i = x W_q,i                    i = 0 .. h-1      (head_dim each, as in multi-head attention)
    k_j = x W_k,j,  v_j = x W_v,j    j = 0 .. h_kv-1
    head_i = softmax(q_i k_{i // g}^T / sqrt(head_dim)) v_{i // g}

so k_proj and v_proj are h_kv * head_dim wide instead of D: fewer parameters and a smaller
key/value cache, the same attention arithmetic per query head. h_kv = h is multi-head attention,
h_kv = 1 multi-query attention. Sapiens2 (Khirodkar et al., 2026) keeps full multi-head attention
in its first and last 8 blocks and uses h/2 key/value heads in between, so the count is per block
(`ViTConfig.num_kv_heads`: one int, or one per block).

`expand_kv` repeats each key/value head for its group (head i reads kv head i // g, the order of
timm's `AttentionRope` and transformers' `repeat_kv`) after the per-head work (qk-norm, rotary
embedding) is done on the h_kv heads; the attention kernel then sees h heads as usual. The
projections must be separate (`qkv_fused=False`): a fused q|k|v Linear would not split evenly.
"""

from __future__ import annotations

import torch


def check_kv_heads(num_heads: int, num_kv_heads: int, qkv_fused: bool) -> None:
    """ValueError unless `num_kv_heads` key/value heads can serve `num_heads` query heads."""
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} is invalid for num_heads={num_heads}; expected a divisor of num_heads "
            "(each key/value head serves an equal group of query heads)"
        )
    if num_kv_heads != num_heads and qkv_fused:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} (grouped-query attention) needs qkv_fused=False: k_proj and v_proj are "
            "narrower than q_proj, so they are separate projections"
        )


def expand_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, h_kv, N, head_dim) -> (B, h_kv * groups, N, head_dim): kv head j serves query heads
    j * groups .. (j + 1) * groups - 1. The identity for groups == 1 (multi-head attention)."""
    if groups == 1:
        return x
    return x.repeat_interleave(groups, dim=1)
