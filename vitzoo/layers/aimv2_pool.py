"""AIMv2's attention-pooling head (Fini et al. 2024; transformers' `Aimv2AttentionPoolingHead`, the
pool of Aimv2VisionModel with `use_head=True`, as in Apple's LiT release): one learned query
attends over the tokens and the attended vector is projected once.

    k, v    = Linear_kv(tokens)                          every token a key and a value
    pooled  = Linear_proj(softmax(query k^T / sqrt(d)) v)

Unlike SigLIP's "map" pool (pool.py) the query is used as it is (no query projection) and there is
no norm and no MLP after the projection. The key and value projections are biased as the blocks'
q/k/v (`qkv_bias`); the output projection always is. timm has no such pool; the parameter names
are vitzoo's: `query` (transformers' `cls_token`; a query used as it is, as CoCa's pooler names
it), `kv` (`k_proj` and `v_proj` concatenated, as the "map" pool holds them), `proj` (`output_proj`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_heads
from .pool import init_queries


class Aimv2Pool(nn.Module):
    """(B, N, D) tokens -> (B, D) pooled feature."""

    def __init__(self, *, dim: int, num_heads: int, kv_bias: bool = False) -> None:
        super().__init__()
        check_heads(dim, num_heads)
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.query = nn.Parameter(torch.zeros(1, 1, dim))
        self.kv = nn.Linear(dim, 2 * dim, bias=kv_bias)
        self.proj = nn.Linear(dim, dim)
        if not self.query.is_meta:  # nothing to initialise on the meta device (see model.init_weights)
            self.init_query()

    def init_query(self) -> None:
        """The learned query, initialised as the "map" pool's latent (timm's init of learned queries)."""
        init_queries(self.query)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """`attn_mask`: (B, 1, 1, N) bool, True for the tokens the query may attend, or a float bias
        added to the logits (token merging's log sizes); None: every token."""
        B, N, D = x.shape
        q = self.query.reshape(1, 1, self.num_heads, self.head_dim).transpose(1, 2).expand(B, -1, -1, -1)
        k, v = self.kv(x).reshape(B, N, 2, self.num_heads, self.head_dim).unbind(2)  # each (B, N, heads, head_dim)
        pooled = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2), attn_mask=attn_mask)
        return self.proj(pooled.transpose(1, 2).reshape(B, D))  # (B, heads, 1, head_dim) -> (B, D)
