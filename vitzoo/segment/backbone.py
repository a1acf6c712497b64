"""The frozen backbone of the segmentation probe: its patch tokens as maps, never trained."""

from __future__ import annotations

import torch
from torch import nn

from ..data.transforms import InputSpec
from ..dense import backbone_of, dense_features
from ..model import VisionTransformer


class FrozenBackbone:
    """`model`'s patch tokens of the last `layers` blocks (1: the last; 4: the last four
    concatenated, DINOv2's "+ms"), each through the final norm, as (B, layers * D, H / p, W / p)
    float32 maps, computed in `dtype` on `device` without gradients."""

    def __init__(
        self, model: nn.Module, layers: int = 1, device: torch.device | None = None, dtype: torch.dtype = torch.float32
    ) -> None:
        self.layers, self.dtype = layers, dtype
        self.device = device or torch.device("cpu")
        self.model: VisionTransformer = backbone_of(model).to(self.device, dtype).eval()
        for param in self.model.parameters():
            param.requires_grad_(False)

    @property
    def spec(self) -> InputSpec:
        return InputSpec.of(self.model)

    @property
    def patch(self) -> tuple[int, int]:
        ph, pw = self.model.patch_embed.patch_size
        return int(ph), int(pw)

    @property
    def channels(self) -> int:
        return self.layers * self.model.embed_dim

    @torch.no_grad()  # not inference_mode: the head trains on these maps
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, self.dtype)
        maps = dense_features(self.model, x, layers=self.layers, concat=True)
        assert isinstance(maps, torch.Tensor)
        return maps.float()
