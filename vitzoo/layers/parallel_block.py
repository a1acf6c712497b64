"""The parallel encoder block (Dehghani et al., "Scaling Vision Transformers to 22 Billion
Parameters", 2023; timm's `ParallelScalingBlock` and `DiffParallelScalingBlock`).

Attention and MLP read the same normalised input and their outputs are summed into one residual
branch, so the MLP's first layer and the q, k, v projections are one matrix product:

    y            = Norm(x)
    [h, q, k, v] = in_proj(y)                      (h: the MLP's hidden units, then q, k, v)
    a            = Attention(q, k, v)              (plain, or differential: diff_attention.py)
    x            = x + DropPath(LayerScale(attn_out_proj(a) + mlp_out_proj(act(h))))

With differential attention (`attn_layer="diff"`, timm's DiffParallelScalingBlock) the two
output projections are one too: `out_proj([a, act(h)])`, and the lambda vectors and sub-norm live
on the block (`blocks.i.lambda_q1`, `blocks.i.sub_norm`). Without a qkv bias the MLP's bias is a
separate `mlp_bias` (timm's names throughout). There is no rotary embedding here.

`capture_attention` and `vitzoo.optimize`'s written-out attention reach this block as they do an
Attention layer (`attn_sink`, `explicit`: attention.py's `attention_layers`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_heads
from .activations import make_activation
from .diff_attention import (
    SUB_NORM_EPS,
    add_lambdas,
    check_diff_heads,
    differential_attention,
    lambda_full,
    lambda_init_for,
)
from .drop_path import DropPath
from .layer_scale import LayerScale
from .linear import linear_module
from .norm import DEFAULT_NORM_EPS, RMSNorm, make_norm


class ParallelBlock(nn.Module):
    records_attention = True  # capture_attention and vitzoo.optimize treat it as an attention layer

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        norm_eps: float = DEFAULT_NORM_EPS,
        init_values: float | None = None,
        act_layer: str = "gelu",
        norm_layer: str = "layernorm",
        attn_layer: str = "attn",
        index: int = 0,
        **unused: object,
    ) -> None:
        super().__init__()
        check_heads(dim, num_heads)
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.diff = attn_layer == "diff"
        hidden = int(mlp_ratio * dim)
        self.in_split = [hidden, dim, dim, dim]
        self.in_norm = make_norm(norm_layer, dim, norm_eps)
        self.in_proj = nn.Linear(dim, hidden + 3 * dim, bias=qkv_bias)
        self.mlp_bias = None if qkv_bias else nn.Parameter(torch.zeros(hidden))
        self.attn_drop = attn_drop
        self.mlp_drop = nn.Dropout(drop)
        self.mlp_act = make_activation(act_layer)
        self.out_proj: nn.Linear | None = None
        self.attn_out_proj: nn.Linear | None = None
        self.mlp_out_proj: nn.Linear | None = None
        if self.diff:
            check_diff_heads(dim, num_heads)
            self.lambda_init = lambda_init_for(index)
            add_lambdas(self, self.head_dim // 2)
            self.sub_norm = RMSNorm(self.head_dim, eps=SUB_NORM_EPS)
            self.out_proj = nn.Linear(dim + hidden, dim)
        else:
            self.attn_out_proj = nn.Linear(dim, dim)
            self.mlp_out_proj = nn.Linear(hidden, dim)
        self.ls = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.attn_sink: list[torch.Tensor] | None = None  # set by capture_attention only
        self.explicit: bool = False  # set by vitzoo.optimize only

    def forward(
        self, x: torch.Tensor, rope: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        if rope is not None:
            raise ValueError("ParallelBlock: a rotary embedding is not supported in parallel blocks")
        B, N, D = x.shape
        h, q, k, v = torch.split(linear_module(self.in_proj, self.in_norm(x)), self.in_split, dim=-1)
        if self.mlp_bias is not None:
            h = h + self.mlp_bias
        q, k, v = (t.reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        a = self._attend(q, k, v, attn_mask).transpose(1, 2).reshape(B, N, D)
        h = self.mlp_drop(self.mlp_act(h))
        if self.out_proj is not None:
            y = linear_module(self.out_proj, torch.cat((a, h), dim=-1))
        else:
            assert self.attn_out_proj is not None and self.mlp_out_proj is not None
            y = linear_module(self.attn_out_proj, a) + linear_module(self.mlp_out_proj, h)
        return x + self.drop_path(self.ls(y))

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """(B, heads, N, head_dim) attention outputs, plain or differential (with its sub-norm)."""
        dropout_p = self.attn_drop if self.training else 0.0
        if self.diff:
            out = differential_attention(
                q,
                k,
                v,
                lambda_full(self, self.lambda_init),
                attn_mask=attn_mask,
                dropout_p=dropout_p,
                sink=self.attn_sink,
                explicit=self.explicit,
            )
            return self.sub_norm(out) * (1 - self.lambda_init)
        if self.attn_sink is None and not self.explicit:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
        scores = (q * self.head_dim**-0.5) @ k.transpose(-2, -1)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if self.attn_sink is not None:
            self.attn_sink.append(weights)
        return F.dropout(weights, p=dropout_p) @ v if dropout_p > 0 else weights @ v
