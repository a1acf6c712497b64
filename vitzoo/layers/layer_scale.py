"""LayerScale (Touvron et al., "Going deeper with Image Transformers", CaiT, 2021): a learned
per-channel factor on the output of each residual branch,

    x = x + diag(gamma) * branch(x),    gamma initialised to a small constant (1e-5, 1e-6),

so that each block starts close to the identity and deep stacks train stably. DeiT III and DINOv2
use it on both branches of every block (`ViTConfig.init_values`). Element-wise: it adds no FLOPs.
"""

from __future__ import annotations

import torch
from torch import nn


class LayerScale(nn.Module):
    """(..., dim) -> (..., dim), channel c scaled by gamma[c]. Parameter name as in timm: `gamma`."""

    def __init__(self, dim: int, init_values: float) -> None:
        super().__init__()
        self.init_values = init_values
        self.gamma = nn.Parameter(torch.full((dim,), float(init_values)))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.gamma.fill_(self.init_values)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma

    def extra_repr(self) -> str:
        return f"dim={self.gamma.shape[0]}, init_values={self.init_values}"
