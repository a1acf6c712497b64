"""Multi-head self-attention.

One fused Linear computes q, k and v for all heads at once (its output rows are ordered
[q | k | v], each split into heads), which is the layout of timm and of the original JAX code.
The attention itself is `F.scaled_dot_product_attention`, which picks a fused kernel
(flash / memory-efficient / oneDNN) and never materialises the (N x N) matrix when it can avoid it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
    ) -> None:
        super().__init__()
        if num_heads <= 0 or dim % num_heads:
            raise ValueError(
                f"embed_dim {dim} is not divisible by num_heads {num_heads}; "
                "expected embed_dim to be a multiple of num_heads"
            )
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        # (B, N, 3D) -> (3, B, heads, N, head_dim): one matmul for q, k and v of every head.
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        # softmax(q k^T / sqrt(head_dim)) v, fused.
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop if self.training else 0.0)
        x = x.transpose(1, 2).reshape(B, N, D)  # concatenate the heads
        return self.proj_drop(self.proj(x))
