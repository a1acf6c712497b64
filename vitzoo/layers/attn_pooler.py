"""CoCa's attentional pooler (Yu et al. 2022; open_clip's `AttentionalPooler`) and the image tower's
pooling built from it (`CocaPool`, `ViTConfig.global_pool="coca"`).

`AttentionalPooler`: N learned queries attend over the encoder's tokens; each side has a norm of
its own, and there is no MLP (unlike the MAP pool, layers/pool.py):

    q       = Linear_q(LayerNorm_q(queries))          N queries of the pooler's width d
    k, v    = Linear_kv(LayerNorm_k(tokens))          every token (width D) is a key and a value
    out     = Linear_proj(softmax(q k^T / sqrt(d / heads)) v)          (B, N, d)

`CocaPool` arranges one or two poolers as open_clip's image tower does (`coca_pool_type`):

    ""          open_clip's released CoCa (vision_cfg.attentional_pool=True): one pooler of N queries
                over the un-normed tokens, then the norm (open_clip's ln_post, `norm` here) of every
                output; the first output is the pooled feature, the N - 1 others the caption tokens
    "parallel"  the paper's: the tokens are normed first (the model's final norm); a caption pooler of
                N queries and, beside it, a contrastive pooler of one query over the same tokens
    "cascade"   as "parallel", but the contrastive pooler attends over the caption tokens

`forward` returns the pooled feature (B, d) that the model's head (open_clip's `proj`) projects;
`forward_tokens` returns it with the caption tokens (open_clip's `tokens`), one pass for both.
Parameter names: `caption.{query, ln_q, ln_k, q, kv, proj}`, `contrastive.*`, `norm`
(vitzoo/text/keymaps.py maps open_clip's `attn_pool`, `attn_pool_contrastive` and `ln_post` on them).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_heads
from .norm import make_norm
from .pool import init_queries

CocaPoolType = Literal["", "parallel", "cascade"]
COCA_POOL_TYPES: tuple[str, ...] = get_args(CocaPoolType)


class AttentionalPooler(nn.Module):
    """(B, L, context_dim) tokens -> (B, num_queries, dim): learned queries attending over them."""

    def __init__(
        self,
        *,
        dim: int,
        context_dim: int,
        num_heads: int,
        num_queries: int,
        norm_eps: float = 1e-5,
        norm_layer: str = "layernorm",
    ) -> None:
        super().__init__()
        check_heads(dim, num_heads)
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.query = nn.Parameter(torch.zeros(num_queries, dim))
        self.ln_q = make_norm(norm_layer, dim, norm_eps)
        self.ln_k = make_norm(norm_layer, context_dim, norm_eps)
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(context_dim, 2 * dim)  # k then v, as open_clip's in_proj stacks them
        self.proj = nn.Linear(dim, dim)
        if not self.query.is_meta:  # nothing to initialise on the meta device
            self.init_query()

    def init_query(self) -> None:
        init_queries(self.query)  # ln_q rescales it anyway

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """`attn_mask`: (B, 1, 1, L) bool, True for the tokens the queries may attend (None: all)."""
        B, L, _ = x.shape
        N, D = self.query.shape
        # The queries are the same for every image: normed and projected once, broadcast over the batch.
        q = self.q(self.ln_q(self.query)).reshape(1, N, self.num_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(self.ln_k(x)).reshape(B, L, 2, self.num_heads, self.head_dim).unbind(2)
        out = F.scaled_dot_product_attention(q.expand(B, -1, -1, -1), k.transpose(1, 2), v.transpose(1, 2), attn_mask)
        return self.proj(out.transpose(1, 2).reshape(B, N, D))


class CocaPool(nn.Module):
    """(B, L, D) encoder tokens -> (B, dim) pooled feature; `forward_tokens` adds the caption tokens."""

    def __init__(
        self,
        *,
        dim: int,
        context_dim: int,
        num_heads: int,
        num_queries: int,
        pool_type: CocaPoolType = "",
        post_norm: bool = True,
        norm_eps: float = 1e-5,
        norm_layer: str = "layernorm",
    ) -> None:
        super().__init__()
        if pool_type not in COCA_POOL_TYPES:
            raise ValueError(
                f"pool_type={pool_type!r} is invalid; expected one of {', '.join(map(repr, COCA_POOL_TYPES))}"
            )
        self.pool_type = pool_type
        options: dict[str, Any] = dict(num_heads=num_heads, norm_eps=norm_eps, norm_layer=norm_layer)
        self.caption = AttentionalPooler(dim=dim, context_dim=context_dim, num_queries=num_queries, **options)
        self.contrastive = None
        if pool_type:  # one query, over the tokens ("parallel") or over the caption pooler's outputs ("cascade")
            inputs = context_dim if pool_type == "parallel" else dim
            self.contrastive = AttentionalPooler(dim=dim, context_dim=inputs, num_queries=1, **options)
        # open_clip's ln_post after the pooler (""); "parallel" / "cascade" norm the tokens before it
        self.norm = make_norm(norm_layer, dim, norm_eps) if post_norm and not pool_type else nn.Identity()

    def forward_tokens(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(pooled (B, dim), caption tokens (B, N - 1, dim) for "", (B, N, dim) otherwise)."""
        tokens = self.norm(self.caption(x, attn_mask))
        if self.contrastive is None:
            return tokens[:, 0], tokens[:, 1:]
        if self.pool_type == "parallel":
            return self.contrastive(x, attn_mask)[:, 0], tokens
        return self.contrastive(tokens)[:, 0], tokens

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pool_type == "parallel":  # the caption pooler is not needed for the pooled feature
            assert self.contrastive is not None
            return self.contrastive(x, attn_mask)[:, 0]
        return self.forward_tokens(x, attn_mask)[0]


def coca_pool_params(
    dim: int, context_dim: int, num_queries: int, pool_type: str, post_norm: bool, norm_params: int
) -> int:
    """CocaPool's parameter count; `norm_params`: one norm's of width `dim` (a LayerNorm's 2 * dim)."""
    per_width = norm_params // dim

    def pooler(queries: int, inputs: int) -> int:  # query, ln_q, ln_k, q, kv, proj
        return queries * dim + per_width * (dim + inputs) + (dim + 1) * dim + (inputs + 1) * 2 * dim + (dim + 1) * dim

    total = pooler(num_queries, context_dim)
    if pool_type:
        total += pooler(1, context_dim if pool_type == "parallel" else dim)
    return total + (norm_params if post_norm and not pool_type else 0)
