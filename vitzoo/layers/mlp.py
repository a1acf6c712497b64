"""The position-wise feed-forward network of a Transformer block: fc1 -> activation -> fc2, with
an optional normalisation of the hidden units before fc2 (`norm`, timm's Mlp `norm_layer`), and
without biases on request (`bias=False`: timm's `proj_bias`, AIMv2). The
gated MLPs (SwiGLU) are in swiglu.py.

fc1 and its activation go through `linear.linear_module`, which for bf16 inference on CPU applies GELU
inside the GEMM (see linear.py); everywhere else it is `act(fc1(x))`.
"""

from __future__ import annotations

import torch
from torch import nn

from .activations import make_activation
from .linear import linear_module
from .norm import DEFAULT_NORM_EPS, make_norm


class Mlp(nn.Module):
    def __init__(
        self,
        *,
        dim: int,
        hidden_dim: int,
        drop: float = 0.0,
        act_layer: str = "gelu",
        norm_layer: str | None = None,
        norm_eps: float = DEFAULT_NORM_EPS,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim, bias=bias)
        # GELU and its tanh form can be fused into fc1 (same names as linear.linear's activations).
        self.fused_act = act_layer if act_layer in ("gelu", "gelu_tanh") else None
        self.act = make_activation(act_layer)  # exact (erf) GELU by default, as in the original ViT and timm
        self.drop1 = nn.Dropout(drop)
        self.norm = make_norm(norm_layer, hidden_dim, norm_eps) if norm_layer else None
        self.fc2 = nn.Linear(hidden_dim, dim, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused_act is not None:
            x = linear_module(self.fc1, x, self.fused_act)
        else:
            x = self.act(self.fc1(x))
        x = self.drop1(x)
        if self.norm is not None:
            x = self.norm(x)
        return self.drop2(linear_module(self.fc2, x))
