"""The hybrid patch embedding: a CNN stem computes a feature map, whose cells (or patches of it)
become the tokens (timm's `HybridEmbed`, its names: `backbone.*`, `proj`).

Two stems, chosen by `ViTConfig.hybrid_stem`:

* "resnetv2": BiT's ResNet (layers/resnetv2_stem.py; `hybrid_layers` its stage depths), then a
  Conv2d `proj` of kernel = stride patch_size / (the ResNet's stride) to `embed_dim`: R50+ViT-B/16
  (stride 16, a 1x1 projection), R26+ViT-S/32, R50+ViT-L/32, R+ViT-Ti/16 with 8x8 patches of the
  stride-4 root (its token stride is 32).
* "mci": MobileCLIP's three-conv stem (layers/mci_stem.py), whose last conv gives `embed_dim`
  channels itself; there is no `proj` (timm's Identity).

`patch_size` is the stride of one token in pixels, as for the plain ViT, so the grid of a
`h x w` image is `(h / patch, w / patch)`; sides must be multiples of it (the stems' "SAME"
padding is then fixed, layers/resnetv2_stem.py).
"""

from __future__ import annotations

import torch
from torch import nn

from .helpers import to_2tuple
from .mci_stem import PATCH as MCI_PATCH
from .mci_stem import mci_flops, mci_params, mci_stem
from .patch_embed import check_image
from .resnetv2_stem import (
    check_resnetv2_layers,
    resnetv2_channels,
    resnetv2_flops,
    resnetv2_params,
    resnetv2_stem,
    resnetv2_stride,
)

HYBRID_STEMS = ("resnetv2", "mci")


def check_hybrid_stem(kind: str, layers: tuple[int, ...], patch_size: tuple[int, int], embed_dim: int) -> None:
    """Raise a ValueError naming the fields unless stem `kind`, `layers` and `patch_size` fit together."""
    if kind not in HYBRID_STEMS:
        raise ValueError(f"hybrid_stem={kind!r} is invalid; expected '' (none) or one of {HYBRID_STEMS}")
    if kind == "mci":
        if layers:
            raise ValueError(f"hybrid_layers={layers!r} is invalid for hybrid_stem='mci'; expected ()")
        if patch_size != (MCI_PATCH, MCI_PATCH) or embed_dim % 4:
            raise ValueError(
                f"hybrid_stem='mci' with patch_size={patch_size}, embed_dim={embed_dim} is invalid: its convs of "
                f"strides 4, 2, 2 make {MCI_PATCH}x{MCI_PATCH} patches, D / 4 channels wide; expected patch_size="
                f"{MCI_PATCH} and embed_dim a multiple of 4"
            )
        return
    check_resnetv2_layers(layers)
    stride = resnetv2_stride(layers)
    if patch_size[0] != patch_size[1] or patch_size[0] % stride:
        raise ValueError(
            f"hybrid_stem='resnetv2' with hybrid_layers={layers!r} and patch_size={patch_size} is invalid: the "
            f"ResNet's map has stride {stride}, which the projection's patches multiply; expected patch_size a "
            f"multiple of {stride}"
        )


def hybrid_params(kind: str, layers: tuple[int, ...], in_chans: int, embed_dim: int, patch: int, bias: bool) -> int:
    """The stem's and projection's parameter count, by arithmetic."""
    if kind == "mci":
        return mci_params(in_chans, embed_dim, bias)
    k = patch // resnetv2_stride(layers)
    return (
        resnetv2_params(in_chans, layers) + resnetv2_channels(layers) * k * k * embed_dim + (embed_dim if bias else 0)
    )


def hybrid_flops(kind: str, layers: tuple[int, ...], in_chans: int, embed_dim: int, patch: int, h: int, w: int) -> int:
    """The stem's and projection's FLOPs (2 per multiply-add) on an h x w image."""
    if kind == "mci":
        return mci_flops(in_chans, embed_dim, h, w)
    proj = 2 * (h // patch) * (w // patch) * resnetv2_channels(layers) * (patch // resnetv2_stride(layers)) ** 2
    return resnetv2_flops(in_chans, layers, h, w) + proj * embed_dim


class HybridEmbed(nn.Module):
    """(B, C, H, W) image -> (B, N, D) tokens through a CNN stem, N = (H / patch) * (W / patch)."""

    def __init__(
        self,
        *,
        kind: str,
        layers: tuple[int, ...] = (),
        img_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
        bias: bool = True,
        strict_img_size: bool = True,
    ) -> None:
        super().__init__()
        self.patch_size = to_2tuple(patch_size, "patch_size")
        check_hybrid_stem(kind, tuple(layers), self.patch_size, embed_dim)
        self.kind, self.in_chans, self.strict_img_size = kind, in_chans, strict_img_size
        self.conv_stem: tuple[int, ...] = ()  # PatchEmbed's attributes: no padding 3x3 stem here
        self.stem: nn.Module | None = None
        self.drop_remainder = False
        self.proj: nn.Module
        self.backbone: nn.Module
        if kind == "mci":
            self.backbone = mci_stem(in_chans, embed_dim, bias)
            self.proj = nn.Identity()
        else:
            self.backbone = resnetv2_stem(in_chans, tuple(layers))
            k = self.patch_size[0] // resnetv2_stride(tuple(layers))
            self.proj = nn.Conv2d(resnetv2_channels(tuple(layers)), embed_dim, k, stride=k, bias=bias)
        self.set_input_size(img_size)

    @property
    def first_weight(self) -> torch.Tensor:
        """The stem's first conv weight: the model's dtype and device."""
        return next(self.backbone.parameters())

    def set_input_size(self, img_size: int | tuple[int, int]) -> None:
        """Set the image size this embedding expects (and its grid); the weights do not depend on it."""
        img_size = to_2tuple(img_size, "img_size")
        if any(s <= 0 or s % p for s, p in zip(img_size, self.patch_size)):
            raise ValueError(
                f"img_size {img_size} is invalid for this hybrid stem ({self.kind}): expected positive multiples of "
                f"its stride, patch_size {self.patch_size}"
            )
        self.img_size = img_size
        self.grid_size = self.dynamic_feat_size(img_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]

    def dynamic_feat_size(self, img_size: tuple[int, int] | torch.Size) -> tuple[int, int]:
        (h, w), (ph, pw) = img_size, self.patch_size
        return (h // ph, w // pw)

    def check_input(self, x: torch.Tensor) -> None:
        """Raise a ValueError naming expected and given shape when `x` does not fit this model."""
        check_image(x, self.in_chans, self.img_size, self.patch_size, self.strict_img_size, False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_image(x, self.in_chans, self.img_size, self.patch_size, self.strict_img_size, False)
        x = self.proj(self.backbone(x))  # (B, D, gh, gw)
        return x.flatten(2).transpose(1, 2)  # (B, N, D), row-major

    def as_linear(self) -> nn.Linear:
        raise ValueError(
            f"this patch embedding is a CNN stem (hybrid_stem={self.kind!r}): its tokens are not a linear map of "
            "the image's patches, so there is no equivalent nn.Linear"
        )
