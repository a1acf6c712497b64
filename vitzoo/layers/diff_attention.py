"""Differential attention (Ye et al., "Differential Transformer", 2024; timm's `DiffAttention`).

Each head splits its query and key into two halves of head_dim / 2 channels and attends twice
over the same values (head_dim channels); the second map, scaled by a learned lambda, is
subtracted from the first, cancelling the attention both maps give to irrelevant tokens:

    A       = softmax(q1 k1^T / sqrt(head_dim / 2)) - lambda * softmax(q2 k2^T / sqrt(head_dim / 2))
    head    = (1 - lambda_init) * RMSNorm(A v)            (the sub-norm over the head's head_dim channels)
    lambda  = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init
    lambda_init = 0.8 - 0.6 * exp(-0.3 * block index)      (fixed; grows with depth)

The four lambda vectors (head_dim / 2 each, shared by the heads) and the sub-norm's scale (RMSNorm,
eps 1e-5, whatever the model's norm) are the only parameters beyond plain attention's qkv and proj;
the names are timm's (`attn.lambda_q1`, ..., `attn.sub_norm.weight`). The q / k halves are the
two halves of each head's channels in the fused qkv output, so a timm checkpoint loads key by key.

`capture_attention` records the differential map A itself, (B, heads, N, N): its rows sum to
1 - lambda rather than 1, and entries may be negative. `differential_attention` is shared with the
parallel block (parallel_block.py), which holds the same parameters on itself.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Attention
from .linear import linear_module
from .norm import RMSNorm

SUB_NORM_EPS = 1e-5  # timm's and the paper's, fixed
LAMBDA_NAMES = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


def lambda_init_for(index: int) -> float:
    """The fixed part of lambda for the block at `index` (0-based), as the paper and timm set it."""
    return 0.8 - 0.6 * math.exp(-0.3 * index)


def add_lambdas(module: nn.Module, half_dim: int) -> None:
    """Register the four learned lambda vectors on `module` (timm's names), drawn as timm does."""
    for name in LAMBDA_NAMES:
        module.register_parameter(name, nn.Parameter(torch.zeros(half_dim)))
    init_lambdas(module)


@torch.no_grad()
def init_lambdas(module: nn.Module) -> None:
    """normal(0, 0.1), timm's init of the lambda vectors."""
    for name in LAMBDA_NAMES:
        param = getattr(module, name)
        if not param.is_meta:
            nn.init.normal_(param, mean=0.0, std=0.1)


def lambda_full(module: nn.Module, lambda_init: float) -> torch.Tensor:
    """lambda = exp(q1 . k1) - exp(q2 . k2) + lambda_init (a 0-d float32 tensor)."""
    q1, k1, q2, k2 = (getattr(module, name) for name in LAMBDA_NAMES)
    lambda_1 = torch.exp(torch.sum(q1 * k1, dim=-1).float())
    lambda_2 = torch.exp(torch.sum(q2 * k2, dim=-1).float())
    return lambda_1 - lambda_2 + lambda_init


def differential_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lam: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    sink: list[torch.Tensor] | None = None,
    explicit: bool = False,
) -> torch.Tensor:
    """q, k, v (B, heads, N, head_dim) -> (B, heads, N, head_dim): A v (before the sub-norm), with
    A the difference of the two softmax maps of the halves of q and k. `attn_mask` a bool key mask
    (True attends); `sink` receives A (explicit path); `explicit` writes the maps out (same numbers)."""
    half = q.shape[-1] // 2
    q1, q2 = q[..., :half], q[..., half:]
    k1, k2 = k[..., :half], k[..., half:]
    lam = lam.type_as(q)
    if sink is None and not explicit:
        out1 = F.scaled_dot_product_attention(q1, k1, v, attn_mask=attn_mask, dropout_p=dropout_p)
        out2 = F.scaled_dot_product_attention(q2, k2, v, attn_mask=attn_mask, dropout_p=dropout_p)
        return out1 - lam * out2
    scale = half**-0.5
    maps = []
    for qi, ki in ((q1, k1), (q2, k2)):
        scores = (qi * scale) @ ki.transpose(-2, -1)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        maps.append(F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights)
    attn = maps[0] - lam * maps[1]
    if sink is not None:
        sink.append(attn)
    return attn @ v


class DiffAttention(Attention):
    """Multi-head differential attention: Attention's fused qkv and proj (so LoRA, `explicit` and
    `capture_attention` work as on plain attention), two maps per head, the sub-norm."""

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        index: int = 0,
    ) -> None:
        super().__init__(dim=dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop)
        check_diff_heads(dim, num_heads)
        self.lambda_init = lambda_init_for(index)
        add_lambdas(self, self.head_dim // 2)
        self.sub_norm = RMSNorm(self.head_dim, eps=SUB_NORM_EPS)

    def forward(
        self,
        x: torch.Tensor,
        rope: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if rope is not None:
            raise ValueError("DiffAttention: a rotary embedding is not supported with differential attention")
        if attn_bias is not None:
            raise ValueError("DiffAttention: an additive attention bias (attn_bias) is not supported")
        B, N, D = x.shape
        q, k, v = self._project(x)
        x = differential_attention(
            q,
            k,
            v,
            lambda_full(self, self.lambda_init),
            attn_mask=attn_mask,
            dropout_p=self.attn_drop if self.training else 0.0,
            sink=self.attn_sink,
            explicit=self.explicit,
        )
        x = self.sub_norm(x) * (1 - self.lambda_init)
        x = x.transpose(1, 2).reshape(B, N, D)
        return self.proj_drop(linear_module(self.proj, x))


def check_diff_heads(dim: int, num_heads: int) -> None:
    """Differential attention halves each head's query and key: the head width must be even."""
    if (dim // num_heads) % 2:
        raise ValueError(
            f"attn_layer='diff' needs an even head width; embed_dim {dim} / num_heads {num_heads} = "
            f"{dim // num_heads}; expected embed_dim / num_heads to be even"
        )
