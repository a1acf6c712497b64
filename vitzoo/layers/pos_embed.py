"""Position embeddings.

Self-attention is permutation invariant, so each token gets a vector that says where it came from.
ViT's ImageNet models *learn* one vector per position (an nn.Parameter, see model.py); the
MNIST tutorial uses the fixed sinusoids of "Attention Is All You Need", computed here.
"""

from __future__ import annotations

import torch


def sincos_1d(num_positions: int, dim: int) -> torch.Tensor:
    """Fixed 1-D sinusoidal table of shape (num_positions, dim):

        PE(pos, 2i)     = sin(pos / 10000^(2i / dim))
        PE(pos, 2i + 1) = cos(pos / 10000^(2i / dim))

    Computed in float64 on the CPU (also when a model is built on the meta device, so that the
    table is real data) and returned as float32. An odd `dim` ends on a sine column.
    """
    if num_positions <= 0 or dim <= 0:
        raise ValueError(f"sincos_1d needs positive num_positions and dim, got {num_positions} and {dim}")
    pos = torch.arange(num_positions, dtype=torch.float64, device="cpu").unsqueeze(1)  # (P, 1)
    two_i = torch.arange(0, dim, 2, dtype=torch.float64, device="cpu")  # 0, 2, 4, ... = 2i
    angle = pos / torch.pow(10000.0, two_i / dim)  # (P, ceil(dim / 2))
    table = torch.empty(num_positions, dim, dtype=torch.float64, device="cpu")
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return table.float()
