"""The stem: the image cut into patches and projected to tokens (layers/patch_embed.py), by a conv
stem's stride-2 stages (`conv_stem`), or by a CNN (`hybrid_stem`, layers/hybrid_embed.py); AIMv2's
norm of the patch tokens (`embed_norm`). It sets the grid of patches every other part is sized by."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from ..checks import check_image_bounds
from ..layers import PatchEmbed, to_2tuple
from ..layers.hybrid_embed import HybridEmbed, check_hybrid_stem, hybrid_flops, hybrid_params
from ..layers.norm import make_norm
from ..layers.patch_embed import check_conv_stem
from .part import Part, Refusal, linear, norm_params

if TYPE_CHECKING:
    from .fields import ViTFields


class Stem(Part):
    name = "stem"

    def check(self, config: ViTFields) -> None:
        img, patch = to_2tuple(config.img_size, "img_size"), to_2tuple(config.patch_size, "patch_size")
        _check_hybrid(config, patch)
        if config.conv_stem:  # the stem pads, so any image size works; the patch size is its stride
            check_conv_stem(config.conv_stem, patch, img)
        elif config.drop_remainder and any(p <= 0 or s < p for s, p in zip(img, patch)):
            raise ValueError(
                f"img_size {config.img_size} is smaller than patch_size {config.patch_size}; "
                "expected at least one whole patch on both axes"
            )
        elif not config.drop_remainder and any(p <= 0 or s <= 0 or s % p for s, p in zip(img, patch)):
            raise ValueError(
                f"img_size {config.img_size} is not divisible by patch_size {config.patch_size}; "
                "expected img_size to be a positive multiple of patch_size on both axes "
                "(or drop_remainder=True to ignore the pixels past the last whole patch)"
            )
        check_image_bounds(img, config.grid_size)  # the position table and attention are sized by it

    def params(self, config: ViTFields) -> int:
        d, (ph, pw) = config.embed_dim, to_2tuple(config.patch_size)
        norm = norm_params(config, d) if config.embed_norm else 0
        if config.hybrid_stem:  # a CNN stem (and its projection) instead of the patch conv
            return norm + hybrid_params(
                config.hybrid_stem, config.hybrid_layers, config.in_chans, d, ph, config.patch_bias
            )
        # A conv stem's 3x3 convs (BatchNorm brings their biases), then one conv per patch.
        channels = (config.in_chans, *config.conv_stem)
        stem = sum(linear(c_in * 9, c_out, False) + 2 * c_out for c_in, c_out in itertools.pairwise(channels))
        kernel = channels[-1] * 9 if config.conv_stem else config.in_chans * ph * pw
        return norm + stem + linear(kernel, d, config.patch_bias)

    def flops(self, config: ViTFields) -> dict[str, int]:
        (h, w), (ph, pw) = to_2tuple(config.img_size), to_2tuple(config.patch_size)
        d, (gh, gw) = config.embed_dim, config.grid_size
        if config.hybrid_stem:  # a CNN stem's convolutions (layers/hybrid_embed.py)
            return {"patch_embed": hybrid_flops(config.hybrid_stem, config.hybrid_layers, config.in_chans, d, ph, h, w)}
        if not config.conv_stem:  # the patch conv is one (C*ph*pw -> D) linear map per patch
            return {"patch_embed": 2 * gh * gw * config.in_chans * ph * pw * d}
        # Every 3x3 stride-2 conv (padding 1) maps a (h, w) map to (ceil(h/2), ceil(w/2)) positions,
        # each a (c_in * 9 -> c_out) linear map; the last one projects to D.
        total, c_in = 0, config.in_chans
        for c_out in (*config.conv_stem, d):
            h, w = -(-h // 2), -(-w // 2)
            total += 2 * h * w * c_in * 9 * c_out
            c_in = c_out
        return {"patch_embed": total}

    def refusal(self, config: ViTFields, what: Refusal) -> str | None:
        if what != "patch_sequence":
            return None
        if config.hybrid_stem:
            return (
                f"this model has a CNN stem (hybrid_stem={config.hybrid_stem!r}): its tokens are not a linear "
                "map of each patch, so it cannot take a patch-sequence batch; expected a (B, C, H, W) image"
            )
        if config.conv_stem:
            return (
                f"this model has a convolutional stem (conv_stem={config.conv_stem}): its tokens are not a "
                "linear map of each patch, so it cannot take a patch-sequence batch; expected a (B, C, H, W) image"
            )
        return None


STEM = Stem()


def _check_hybrid(config: ViTFields, patch: tuple[int, int]) -> None:
    if not config.hybrid_stem:
        if config.hybrid_layers:
            raise ValueError(
                f"hybrid_layers={config.hybrid_layers!r} needs hybrid_stem='resnetv2'; expected () without a stem"
            )
        return
    combined = (
        ("conv_stem", config.conv_stem),
        ("drop_remainder", config.drop_remainder),
        ("embed_norm", config.embed_norm),
    )
    for name, value in combined:
        if value:
            raise ValueError(
                f"hybrid_stem={config.hybrid_stem!r} cannot be combined with {name}={value!r}: the hybrid stem "
                f"is the patch embedding and takes multiples of its stride; expected {name} off"
            )
    check_hybrid_stem(config.hybrid_stem, config.hybrid_layers, patch, config.embed_dim)


def new_patch_embed(config: ViTFields) -> PatchEmbed | HybridEmbed:
    c = config
    if c.hybrid_stem:
        return HybridEmbed(
            kind=c.hybrid_stem,
            layers=c.hybrid_layers,
            img_size=c.img_size,
            patch_size=c.patch_size,
            in_chans=c.in_chans,
            embed_dim=c.embed_dim,
            bias=c.patch_bias,
            strict_img_size=not c.dynamic_img_size,
        )
    return PatchEmbed(
        img_size=c.img_size,
        patch_size=c.patch_size,
        in_chans=c.in_chans,
        embed_dim=c.embed_dim,
        conv_stem=c.conv_stem,
        bias=c.patch_bias,
        strict_img_size=not c.dynamic_img_size,
        drop_remainder=c.drop_remainder,
        norm=make_norm(c.norm_layer, c.embed_dim, c.norm_eps) if c.embed_norm else None,
    )


def first_conv(config: ViTFields) -> str:
    """The name of the model's first convolution, as timm names it (its pretrained cfg's first_conv)."""
    if not config.hybrid_stem:
        return "patch_embed.proj"
    return "patch_embed.backbone." + (
        "0.conv" if config.hybrid_stem == "mci" else "stem.conv" if config.hybrid_layers else "conv"
    )
