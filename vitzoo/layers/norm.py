"""The normalisation layers of the blocks, by the name `ViTConfig.norm_layer` gives them.

layernorm   LayerNorm (Ba et al. 2016): subtract the mean, divide by the standard deviation, then a
            learned scale and bias; every ViT family in the zoo
rmsnorm     RMSNorm (Zhang & Sennrich 2019): divide by the root mean square, then a learned scale, no
            mean and no bias; timm's `RmsNorm` (AIMv2, DeepSeek's ViT), parameter `weight` only

RMSNorm is written out with the same operations as timm's `rms_norm` (torch has `nn.RMSNorm` only
from 2.4), so a model with it computes what timm's does, bit for bit.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import nn

NormName = Literal["layernorm", "rmsnorm"]
NORMS: tuple[str, ...] = get_args(NormName)
# timm's ViT norms' eps (its LayerNorm partial): every layer's default and ViTConfig.norm_eps's
DEFAULT_NORM_EPS = 1e-6


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension."""

    def __init__(self, dim: int, eps: float = DEFAULT_NORM_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * self.weight

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def make_norm(name: str, dim: int, eps: float) -> nn.Module:
    """A fresh normalisation layer `name` (one of NORMS) over `dim` channels."""
    if name == "layernorm":
        return nn.LayerNorm(dim, eps=eps)
    if name == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    raise ValueError(f"norm_layer={name!r} is invalid; expected one of {', '.join(map(repr, NORMS))}")
