"""DINOv3's linear segmentation head: a 1x1 convolution over the patch tokens.

    head = LinearHead(in_channels=768, num_classes=150)     # features (B, 768, h, w) -> logits (B, 150, h, w)

As in DINOv3's `LinearHead` (dinov3/eval/segmentation/models/heads/linear_head.py), in its order:
channel dropout (`nn.Dropout2d`, 0.1, in training only), BatchNorm over the channels, then the
1x1 convolution, its weights drawn from N(0, 0.01²) and its bias zero. The logits are at the patch
grid; the loss and the predictions upsample them bilinearly to the mask (`upsampled`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LinearHead(nn.Module):
    """Dropout2d, BatchNorm2d, 1x1 Conv2d: (B, C, h, w) features -> (B, num_classes, h, w) logits."""

    def __init__(self, in_channels: int, num_classes: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = nn.Dropout2d(dropout)
        self.norm = nn.BatchNorm2d(in_channels)
        self.conv = nn.Conv2d(in_channels, num_classes, kernel_size=1)
        nn.init.normal_(self.conv.weight, mean=0.0, std=0.01)
        assert self.conv.bias is not None
        nn.init.zeros_(self.conv.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.conv(self.norm(self.dropout(features)))


def upsampled(logits: torch.Tensor, size: tuple[int, ...]) -> torch.Tensor:
    """Logits (B, K, h, w) resized bilinearly to `size` (H, W), as DINOv3 and mmseg do."""
    if tuple(logits.shape[-2:]) == tuple(size):
        return logits
    return F.interpolate(logits, size=size, mode="bilinear", align_corners=False)
