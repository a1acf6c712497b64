"""Feature extraction models: `vitzoo.create(name, features_only=True, out_indices=...)`.

The model returned is timm's FeatureGetterNet for a ViT, written for vitzoo (timm is optional):
it keeps the blocks up to the last one taken (`prune_intermediate_layers`), and its forward is
`forward_intermediates(x, out_indices, intermediates_only=True)`: a list of (B, D, rows, columns)
maps, one per chosen block, in block order. `feature_info` describes them as timm's FeatureInfo
does (`channels()`, `reduction()`, `module_name()`), so detection and segmentation code written
for timm's feature models runs on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

FEATURE_CLASSES = ("getter",)
DEFAULT_OUT_INDICES = 3  # the last three blocks, timm's default for its ViTs


class FeatureInfo:
    """The chosen feature maps: a list of dicts (num_chs, reduction, module), read by timm's names."""

    def __init__(self, entries: Sequence[dict[str, Any]]) -> None:
        self.info = [dict(entry) for entry in entries]

    def get(self, key: str, idx: int | Sequence[int] | None = None) -> Any:
        if idx is None:
            return [entry[key] for entry in self.info]
        if isinstance(idx, int):
            return self.info[idx][key]
        return [self.info[i][key] for i in idx]

    def channels(self, idx: int | Sequence[int] | None = None) -> Any:
        return self.get("num_chs", idx)

    def reduction(self, idx: int | Sequence[int] | None = None) -> Any:
        return self.get("reduction", idx)

    def module_name(self, idx: int | Sequence[int] | None = None) -> Any:
        return self.get("module", idx)

    def get_dicts(self) -> list[dict[str, Any]]:
        return [dict(entry) for entry in self.info]

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return self.info[idx]

    def __len__(self) -> int:
        return len(self.info)

    def __repr__(self) -> str:
        return f"FeatureInfo({self.info!r})"


class FeatureGetterNet(nn.Module):
    """(B, C, H, W) -> [(B, D, rows, columns)] of the blocks in `out_indices` (see the module docstring).

    out_indices: an int n = the last n blocks, or a list of block indices (negative from the end).
    norm: pass each map through the final LayerNorm. The wrapped model is `self.model`."""

    def __init__(self, model: nn.Module, out_indices: int | Sequence[int] = DEFAULT_OUT_INDICES, norm: bool = False):
        super().__init__()
        vit: Any = model  # a VisionTransformer, or a plugin's model that speaks the same methods
        for method in ("forward_intermediates", "prune_intermediate_layers", "feature_info"):
            if not hasattr(model, method):
                raise TypeError(
                    f"features_only=True needs a model with {method} (a vitzoo VisionTransformer); "
                    f"{type(model).__name__} has none"
                )
        every_block = vit.feature_info
        self.out_indices: list[int] = vit.prune_intermediate_layers(out_indices, prune_norm=not norm)
        self.feature_info = FeatureInfo([every_block[i] for i in self.out_indices])
        self.norm = norm
        self.output_fmt = "NCHW"
        self.model = model
        self.pretrained_cfg = vit.pretrained_cfg

    @property
    def default_cfg(self) -> dict[str, Any]:
        vit: Any = self.model
        return dict(vit.default_cfg)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        vit: Any = self.model
        return vit.forward_intermediates(
            x, self.out_indices, norm=self.norm, output_fmt=self.output_fmt, intermediates_only=True
        )


def feature_model(
    model: nn.Module, out_indices: int | Sequence[int] | None = None, feature_cls: str | None = None
) -> FeatureGetterNet:
    """`model` wrapped for `create(..., features_only=True)`; `feature_cls` None or "getter"."""
    if feature_cls not in (None, *FEATURE_CLASSES):
        raise ValueError(
            f"feature_cls={feature_cls!r} is invalid; expected None or 'getter' (vitzoo's ViTs have one feature "
            "wrapper: forward_intermediates)"
        )
    if out_indices is None:
        depth = len(getattr(model, "feature_info", ())) or DEFAULT_OUT_INDICES
        out_indices = min(DEFAULT_OUT_INDICES, depth)
    return FeatureGetterNet(model, out_indices)
