"""Multihead attention pooling ("MAP", Lee et al. 2019; the head of SigLIP and big_vision's ViTs).

Instead of reading a class token or averaging, one learned query (the *latent*) attends over the
tokens, and the attended vector goes through a residual MLP:

    q       = Linear_q(latent)                       one query, split into heads
    k, v    = Linear_kv(tokens)                      every token is a key and a value
    pooled  = Linear_proj(softmax(q k^T / sqrt(d)) v)
    pooled  = pooled + Mlp(LayerNorm(pooled))

Parameter names follow timm's AttentionPoolLatent (latent, q, kv, proj, norm, mlp.fc1, mlp.fc2), so
timm's SigLIP checkpoints load key by key.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_heads
from .mlp import Mlp
from .norm import DEFAULT_NORM_EPS, make_norm


@torch.no_grad()
def init_queries(queries: torch.Tensor) -> None:
    """timm's init of learned queries (this pool's latent, CoCa's, attn_pooler.py): a normal of std
    1/sqrt(D) truncated at two standard deviations."""
    std = 1 / math.sqrt(queries.shape[-1])
    nn.init.trunc_normal_(queries, std=std, a=-2 * std, b=2 * std)


class AttentionPool(nn.Module):
    """(B, N, D) tokens -> (B, D) pooled feature."""

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        norm_eps: float = DEFAULT_NORM_EPS,
        act_layer: str = "gelu",
        norm_layer: str = "layernorm",
    ) -> None:
        super().__init__()
        check_heads(dim, num_heads)
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.latent = nn.Parameter(torch.zeros(1, 1, dim))
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = make_norm(norm_layer, dim, norm_eps)
        self.mlp = Mlp(dim=dim, hidden_dim=int(dim * mlp_ratio), act_layer=act_layer)
        if not self.latent.is_meta:  # nothing to initialise on the meta device (see model.init_weights)
            self.init_latent()

    def init_latent(self) -> None:
        init_queries(self.latent)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """`attn_mask`: (B, 1, 1, N) bool, True for the tokens the query may attend (None: all)."""
        B, N, D = x.shape
        # The query is the same for every image: project it once, then broadcast over the batch.
        q = self.q(self.latent).reshape(1, 1, self.num_heads, self.head_dim).transpose(1, 2).expand(B, -1, -1, -1)
        # (B, N, 2, heads, head_dim) split on dim 2 into k and v, each (B, heads, N, head_dim)
        k, v = self.kv(x).reshape(B, N, 2, self.num_heads, self.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        pooled = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, heads, 1, head_dim)
        pooled = self.proj(pooled.transpose(1, 2).reshape(B, 1, D))
        pooled = pooled + self.mlp(self.norm(pooled))
        return pooled[:, 0]
