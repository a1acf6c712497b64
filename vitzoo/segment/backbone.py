"""The frozen backbone of the segmentation probe: its patch tokens as maps, never trained."""

from __future__ import annotations

import torch
from torch import nn

from ..data.transforms import InputSpec
from ..dense import backbone_of, dense_features
from ..inference.batches import OnReport, for_batches
from ..model import VisionTransformer
from ..precision import cast_model, check_outputs


class FrozenBackbone:
    """`model`'s patch tokens of the last `layers` blocks (1: the last; 4: the last four
    concatenated, DINOv2's "+ms"), each through the final norm, as (B, layers * D, H / p, W / p)
    float32 maps, computed in `dtype` on `device` without gradients. The cast is precision.cast_model's
    (a weight beyond `dtype`'s range is refused), and maps computed in fp16 are checked as every
    command's outputs are (precision.check_outputs: NaN or infinite maps are refused)."""

    def __init__(
        self, model: nn.Module, layers: int = 1, device: torch.device | None = None, dtype: torch.dtype = torch.float32
    ) -> None:
        self.layers, self.dtype = layers, dtype
        self.device = device or torch.device("cpu")
        self.model: VisionTransformer = cast_model(backbone_of(model), dtype).to(self.device).eval()
        for param in self.model.parameters():
            param.requires_grad_(False)
        self.maps: nn.Module = _DenseMaps(self.model, layers)

    def optimize(self, batch: int, crop: int, calls: int, on_report: OnReport | None = None) -> None:
        """Compute the maps the fastest way vitzoo.optimize finds for `calls` batches of `batch`
        crops of `crop` pixels (other shapes run as before; a short run is not tuned)."""
        spec = self.spec
        self.maps = for_batches(
            self.maps,
            images=batch,
            batch_size=batch,
            sample=(spec.channels, crop, crop),
            dtype=self.dtype,
            device=self.device,
            calls=calls,
            on_report=on_report,
        )

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
        maps = self.maps(x)
        assert isinstance(maps, torch.Tensor)
        check_outputs(maps)
        return maps.float()


class _DenseMaps(nn.Module):
    """The maps of FrozenBackbone as a module (what vitzoo.optimize times and compiles)."""

    def __init__(self, model: VisionTransformer, layers: int) -> None:
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        maps = dense_features(self.model, x, layers=self.layers, concat=True)
        assert isinstance(maps, torch.Tensor)
        return maps
