"""The MLP activations the ViT families use, by the name `ViTConfig.act_layer` gives them.

gelu        x * Phi(x), Phi the standard normal CDF (erf): the original ViT, DeiT, DINO, MAE, timm
gelu_tanh   the tanh approximation of GELU (Hendrycks & Gimpel, 2016), which transformers' SigLIP
            calls "gelu_pytorch_tanh"
quick_gelu  x * sigmoid(1.702 x), the sigmoid approximation that OpenAI's CLIP was trained with
silu        x * sigmoid(x) (Swish): the gate of the SwiGLU MLPs (swiglu.py; DINOv2-g, EVA-02, DINOv3)

The three are close but not equal: weights must be run with the activation they were trained with.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import nn

ActName = Literal["gelu", "gelu_tanh", "quick_gelu", "silu"]
ACTIVATIONS: tuple[str, ...] = get_args(ActName)


class QuickGELU(nn.Module):
    """x * sigmoid(1.702 x) (OpenAI CLIP)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


def make_activation(name: str) -> nn.Module:
    """A fresh activation module for `name`, one of ACTIVATIONS."""
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    if name == "quick_gelu":
        return QuickGELU()
    if name == "silu":
        return nn.SiLU()
    raise ValueError(f"act_layer={name!r} is invalid; expected one of {', '.join(map(repr, ACTIVATIONS))}")
