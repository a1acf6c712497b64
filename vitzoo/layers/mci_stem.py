"""MobileCLIP's MCI stem: the patch embedding of MobileCLIP-B's ViT-B/16 image encoder ("MobileCLIP:
Fast Image-Text Models through Multi-Modal Reinforced Training", Vasu et al., 2024; kept by MobileCLIP2).

Three non-overlapping convolutions (kernel = stride, no padding) replace the single 16x16 cut:

    x = GELU(BatchNorm(Conv4x4/4(image)))      D / 4 channels
    x = GELU(BatchNorm(Conv2x2/2(x)))          D / 4 channels
    tokens = Conv2x2/2(x) + bias               D channels: one token per 16x16 patch

Each token still sees only its own 16x16 pixels, but through a small non-linear network instead
of one linear map. The checkpoints hold the inference form (each BatchNorm a plain layer after its
conv, no re-parameterisable branches), which is what this module computes: timm's `ConvStem` of
`vit_base_mci_224`, its parameter names (`0.conv`, `0.bn`, `1.conv`, `1.bn`, `2.conv`). In
evaluation the BatchNorms use their running statistics; in training, the batch's.
"""

from __future__ import annotations

import torch
from torch import nn

KERNELS = (4, 2, 2)  # also the strides
PATCH = 16
BN_EPS = 1e-5


class ConvNormAct(nn.Module):
    """A kernel = stride conv, then BatchNorm and GELU (`last`: the conv with a bias alone)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, last: bool, bias: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride=kernel, bias=last and bias)
        self.bn: nn.Module = nn.Identity() if last else nn.BatchNorm2d(c_out, eps=BN_EPS)
        self.act: nn.Module = nn.Identity() if last else nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


def mci_channels(embed_dim: int) -> tuple[int, int, int]:
    return (embed_dim // 4, embed_dim // 4, embed_dim)


def mci_stem(in_chans: int, embed_dim: int, bias: bool = True) -> nn.Sequential:
    """The three stages; the last conv's bias is `bias` (ViTConfig.patch_bias)."""
    channels = mci_channels(embed_dim)
    stages = []
    for i, (c_in, c_out, k) in enumerate(zip((in_chans, *channels), channels, KERNELS)):
        stages.append(ConvNormAct(c_in, c_out, k, last=i == len(KERNELS) - 1, bias=bias))
    return nn.Sequential(*stages)


def mci_params(in_chans: int, embed_dim: int, bias: bool = True) -> int:
    """Conv weights, the BatchNorms' scales and shifts and the last conv's bias (running statistics are buffers)."""
    c = embed_dim // 4
    return in_chans * c * 16 + 2 * c + c * c * 4 + 2 * c + c * embed_dim * 4 + (embed_dim if bias else 0)


def mci_flops(in_chans: int, embed_dim: int, h: int, w: int) -> int:
    """The three convolutions' FLOPs (2 per multiply-add) on an h x w image."""
    c = embed_dim // 4
    cells4, cells16 = (h // 4) * (w // 4), (h // 16) * (w // 16)
    return 2 * (cells4 * in_chans * c * 16 + (h // 8) * (w // 8) * c * c * 4 + cells16 * c * embed_dim * 4)
