"""The built-in named models: each one a config (shapes identical to timm's where timm has it)
and the pretrained sources it knows. Sources are data; loading them is vitzoo.weights' job."""

from __future__ import annotations

from .registry import _current_origin, register
from .model import ViTConfig
from .weights.pretrained_cfg import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    INCEPTION_MEAN,
    INCEPTION_STD,
    MNIST_MEAN,
    MNIST_STD,
    PretrainedCfg,
)


def _timm_augreg(repo: str, description: str, **kw) -> PretrainedCfg:
    """A timm hub release of Google's AugReg weights (inputs normalised to [-1, 1])."""
    return PretrainedCfg(
        source=f"hf-hub:timm/{repo}", mean=INCEPTION_MEAN, std=INCEPTION_STD, crop_pct=0.9,
        interpolation="bicubic", license="apache-2.0", description=description, label_set="imagenet-1k", **kw,
    )


def _timm_deit(repo: str) -> PretrainedCfg:
    # crop_pct 0.9 is what timm's release of these weights states in its config.json (the DeiT
    # paper evaluated at 0.875); the source's own config wins, so the two must agree.
    return PretrainedCfg(
        source=f"hf-hub:timm/{repo}", mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_pct=0.9,
        interpolation="bicubic", license="apache-2.0", label_set="imagenet-1k",
        description="DeiT (Touvron et al. 2021), ImageNet-1k, Facebook release",
    )


_IN1K = "ImageNet-21k pretrain, ImageNet-1k fine-tune (AugReg, Steiner et al. 2021)"
_IMAGENET_CFG = PretrainedCfg()  # preprocessing for models without weights: 224, [-1, 1]
_MNIST_CFG = PretrainedCfg(
    input_size=(1, 28, 28), mean=MNIST_MEAN, std=MNIST_STD, interpolation="bilinear", crop_pct=1.0,
    num_classes=10, label_names=tuple(str(d) for d in range(10)),
)

_current_origin.append("built-in")
try:
    # ------------------------------------------------------------------ MNIST-sized models
    # The tutorial's model, exactly: 32x32 digits, 2x2 patches of 16, d_model 9, no final norm.
    register(
        "vit_mnist_tiny",
        base=ViTConfig(
            img_size=32, patch_size=16, in_chans=1, num_classes=10, embed_dim=9, depth=3, num_heads=3,
            mlp_ratio=4.0, pos_embed="sincos", final_norm=False,
        ),
        default_cfg=_MNIST_CFG.replace(input_size=(1, 32, 32)),
        description="The classic from-scratch MNIST tutorial ViT (5,689 parameters), fixed sinusoidal positions",
    )
    # Tuned for training from scratch on 2 CPU cores (benchmarks/accuracy.py). A hybrid ViT: two
    # 3x3 stride-2 conv stages (32, 64 channels, BatchNorm, ReLU) and a stride-2 projection make
    # 4x4 = 16 tokens of 64 dims, each seeing an 8x8 cell through overlapping filters; 4 blocks.
    # At the token count of 7x7 patches it learns much more per epoch (Fashion-MNIST, seed 0: 91.6%
    # after 20 epochs for a 16/32 stem vs 88.8% after 14 for 7x7 patches). Moving compute from the
    # transformer into the stem paid again: a 32/64 stem with 4 blocks trains 1.12x faster than a
    # 16/32 stem with 6 (2 threads; 1.14x on 1) and reaches 92.46 / 92.01% on Fashion-MNIST after
    # 20 epochs (seeds 0 / 1, 1 thread) against 91.99 / 91.71%; width 96 with 4 blocks: 91.68 / 91.51%.
    # Average pooling over the tokens (no class token) learns faster than a class token when data is small.
    register(
        "vit_mnist",
        base=ViTConfig(
            img_size=28, patch_size=8, conv_stem=(32, 64), in_chans=1, num_classes=10, embed_dim=64, depth=4,
            num_heads=4, mlp_ratio=2.0, class_token=False, global_pool="avg",
        ),
        default_cfg=_MNIST_CFG,
        description="Recommended small hybrid ViT for 28x28 digits and fashion items (conv stem, 16 tokens, average pooling)",
    )

    # ------------------------------------------------------------------ ImageNet ViT family
    for name, timm_name, kw in [
        ("vit_ti16", "vit_tiny_patch16_224", dict(embed_dim=192, depth=12, num_heads=3)),
        ("vit_s16", "vit_small_patch16_224", dict(embed_dim=384, depth=12, num_heads=6)),
        ("vit_b16", "vit_base_patch16_224", dict(embed_dim=768, depth=12, num_heads=12)),
        ("vit_b32", "vit_base_patch32_224", dict(embed_dim=768, depth=12, num_heads=12, patch_size=32)),
        ("vit_l16", "vit_large_patch16_224", dict(embed_dim=1024, depth=24, num_heads=16)),
    ]:
        sources = {"augreg_in21k_ft_in1k": _timm_augreg(f"{timm_name}.augreg_in21k_ft_in1k", _IN1K)}
        if name == "vit_b16":  # timm's default for ViT-B/16 is the re-tuned AugReg2 release
            sources = {"augreg2_in21k_ft_in1k": _timm_augreg(f"{timm_name}.augreg2_in21k_ft_in1k", _IN1K + ", AugReg2"), **sources}
        register(
            name, base=ViTConfig(img_size=224, patch_size=kw.pop("patch_size", 16), **kw),
            pretrained=sources, default_cfg=_IMAGENET_CFG,
            description=f"ViT at 224, same shapes as timm's {timm_name}",
        )

    register(
        "vit_b16_in21k", base="vit_b16", num_classes=21843, representation_size=768,
        pretrained={
            "google_in21k": PretrainedCfg(
                source="hf-hub:google/vit-base-patch16-224-in21k", mean=INCEPTION_MEAN, std=INCEPTION_STD,
                # Google zeroed the 21k classifier of this release and transformers' ViTModel has none:
                # the checkpoint is a feature extractor (num_classes=0) ending in the representation layer.
                interpolation="bilinear", crop_pct=1.0, num_classes=0, license="apache-2.0",
                description="Original ImageNet-21k ViT-B/16 (transformers layout; its pooler is the representation layer, no classifier)",
            )
        },
        description="ViT-B/16 with the 768-d representation layer of the original ImageNet-21k release",
    )

    # ------------------------------------------------------------------ DeiT
    for size, timm_size, kw in [
        ("ti", "tiny", dict(embed_dim=192, num_heads=3)),
        ("s", "small", dict(embed_dim=384, num_heads=6)),
        ("b", "base", dict(embed_dim=768, num_heads=12)),
    ]:
        for distilled in (False, True):
            suffix = "_distilled" if distilled else ""
            repo = f"deit_{timm_size}{suffix}_patch16_224.fb_in1k"
            register(
                f"deit_{size}16{suffix}",
                base=ViTConfig(img_size=224, patch_size=16, depth=12, distilled=distilled, **kw),
                pretrained={"fb_in1k": _timm_deit(repo)},
                default_cfg=_IMAGENET_CFG.replace(mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_pct=0.9),
                description=f"DeiT-{size.upper()}/16{' with distillation token' if distilled else ''}, same shapes as timm's {repo.split('.')[0]}",
            )
finally:
    _current_origin.pop()

# timm counterparts of the built-in names (used by tests, benchmarks and `vitzoo export`).
TIMM_NAMES = {
    "vit_ti16": "vit_tiny_patch16_224",
    "vit_s16": "vit_small_patch16_224",
    "vit_b16": "vit_base_patch16_224",
    "vit_b32": "vit_base_patch32_224",
    "vit_l16": "vit_large_patch16_224",
    "deit_ti16": "deit_tiny_patch16_224",
    "deit_s16": "deit_small_patch16_224",
    "deit_b16": "deit_base_patch16_224",
    "deit_ti16_distilled": "deit_tiny_distilled_patch16_224",
    "deit_s16_distilled": "deit_small_distilled_patch16_224",
    "deit_b16_distilled": "deit_base_distilled_patch16_224",
}
