"""The position-wise feed-forward network of a Transformer block: fc1 -> GELU -> fc2."""

from __future__ import annotations

import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, *, dim: int, hidden_dim: int, drop: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()  # exact (erf) GELU, as in the original ViT and timm
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))
