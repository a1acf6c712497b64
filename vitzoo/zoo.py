"""The built-in named models, as data: each one a config (shapes identical to timm's where timm
has it), its preprocessing, the pretrained sources it knows and its timm counterpart.

The registry (vitzoo/registry.py) reads `MODELS` on first use; loading a source is vitzoo.weights'
job. This module imports only the model config and `PretrainedCfg`, so it sits below both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import ViTConfig
from .pretrained_cfg import (
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
        source=f"hf-hub:timm/{repo}",
        mean=INCEPTION_MEAN,
        std=INCEPTION_STD,
        crop_pct=0.9,
        interpolation="bicubic",
        license="apache-2.0",
        description=description,
        label_set="imagenet-1k",
        **kw,
    )


def _timm_deit(repo: str) -> PretrainedCfg:
    # crop_pct 0.9 is what timm's release of these weights states in its config.json (the DeiT
    # paper evaluated at 0.875); the source's own config wins, so the two must agree.
    return PretrainedCfg(
        source=f"hf-hub:timm/{repo}",
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        crop_pct=0.9,
        interpolation="bicubic",
        license="apache-2.0",
        label_set="imagenet-1k",
        description="DeiT (Touvron et al. 2021), ImageNet-1k, Facebook release",
    )


_IN1K = "ImageNet-21k pretrain, ImageNet-1k fine-tune (AugReg, Steiner et al. 2021)"
_IMAGENET_CFG = PretrainedCfg()  # preprocessing for models without weights: 224, [-1, 1]
_MNIST_CFG = PretrainedCfg(
    input_size=(1, 28, 28),
    mean=MNIST_MEAN,
    std=MNIST_STD,
    interpolation="bilinear",
    crop_pct=1.0,
    num_classes=10,
    label_names=tuple(str(d) for d in range(10)),
)


@dataclass(frozen=True)
class ZooModel:
    """One built-in model: a name for a config, with what it knows about weights."""

    name: str
    config: ViTConfig
    default_cfg: PretrainedCfg  # preprocessing when no weights are loaded
    pretrained: dict[str, PretrainedCfg] = field(default_factory=dict)  # tag -> source; first is default
    description: str = ""
    timm_name: str | None = None  # the timm architecture with the same shapes and parameter names


def _mnist_models() -> list[ZooModel]:
    return [
        # The tutorial's model, exactly: 32x32 digits, 2x2 patches of 16, d_model 9, no final norm.
        ZooModel(
            "vit_mnist_tiny",
            ViTConfig(
                img_size=32,
                patch_size=16,
                in_chans=1,
                num_classes=10,
                embed_dim=9,
                depth=3,
                num_heads=3,
                mlp_ratio=4.0,
                pos_embed="sincos",
                final_norm=False,
            ),
            _MNIST_CFG.replace(input_size=(1, 32, 32)),
            description="The classic from-scratch MNIST tutorial ViT (5,689 parameters), fixed sinusoidal positions",
        ),
        # Shaped for training from scratch on a CPU (the measurements behind it: docs/recipes.md).
        # A hybrid ViT: two 3x3 stride-2 conv stages (32, 64 channels, BatchNorm, ReLU) and a
        # stride-2 projection make 4x4 = 16 tokens of 64 dims. Compute in the conv stem learns faster
        # on small images than compute in tiny, overhead-bound transformer matrices, and average
        # pooling learns faster than a class token when data is small.
        ZooModel(
            "vit_mnist",
            ViTConfig(
                img_size=28,
                patch_size=8,
                conv_stem=(32, 64),
                in_chans=1,
                num_classes=10,
                embed_dim=64,
                depth=4,
                num_heads=4,
                mlp_ratio=2.0,
                class_token=False,
                global_pool="avg",
            ),
            _MNIST_CFG,
            description="Recommended small hybrid ViT for 28x28 digits and fashion items (conv stem, 16 tokens, average pooling)",
        ),
    ]


def _vit_models() -> list[ZooModel]:
    models = []
    for name, timm_name, embed_dim, depth, num_heads, patch_size in [
        ("vit_ti16", "vit_tiny_patch16_224", 192, 12, 3, 16),
        ("vit_s16", "vit_small_patch16_224", 384, 12, 6, 16),
        ("vit_b16", "vit_base_patch16_224", 768, 12, 12, 16),
        ("vit_b32", "vit_base_patch32_224", 768, 12, 12, 32),
        ("vit_l16", "vit_large_patch16_224", 1024, 24, 16, 16),
    ]:
        sources = {"augreg_in21k_ft_in1k": _timm_augreg(f"{timm_name}.augreg_in21k_ft_in1k", _IN1K)}
        if name == "vit_b16":  # timm's default for ViT-B/16 is the re-tuned AugReg2 release
            sources = {
                "augreg2_in21k_ft_in1k": _timm_augreg(f"{timm_name}.augreg2_in21k_ft_in1k", _IN1K + ", AugReg2"),
                **sources,
            }
        models.append(
            ZooModel(
                name,
                ViTConfig(img_size=224, patch_size=patch_size, embed_dim=embed_dim, depth=depth, num_heads=num_heads),
                _IMAGENET_CFG,
                sources,
                description=f"ViT at 224, same shapes as timm's {timm_name}",
                timm_name=timm_name,
            )
        )
    vit_b16 = models[2].config
    models.append(
        ZooModel(
            "vit_b16_in21k",
            vit_b16.replace(num_classes=21843, representation_size=768),
            _IMAGENET_CFG,
            {
                "google_in21k": PretrainedCfg(
                    source="hf-hub:google/vit-base-patch16-224-in21k",
                    mean=INCEPTION_MEAN,
                    std=INCEPTION_STD,
                    # Google zeroed the 21k classifier of this release and transformers' ViTModel has none:
                    # the checkpoint is a feature extractor (num_classes=0) ending in the representation layer.
                    interpolation="bilinear",
                    crop_pct=1.0,
                    num_classes=0,
                    license="apache-2.0",
                    description="Original ImageNet-21k ViT-B/16 (transformers layout; its pooler is the representation layer, no classifier)",
                )
            },
            description="ViT-B/16 with the 768-d representation layer of the original ImageNet-21k release",
        )
    )
    return models


def _deit_models() -> list[ZooModel]:
    models = []
    for size, timm_size, embed_dim, num_heads in [
        ("ti", "tiny", 192, 3),
        ("s", "small", 384, 6),
        ("b", "base", 768, 12),
    ]:
        for distilled in (False, True):
            suffix = "_distilled" if distilled else ""
            timm_name = f"deit_{timm_size}{suffix}_patch16_224"
            models.append(
                ZooModel(
                    f"deit_{size}16{suffix}",
                    ViTConfig(
                        img_size=224,
                        patch_size=16,
                        embed_dim=embed_dim,
                        depth=12,
                        num_heads=num_heads,
                        distilled=distilled,
                    ),
                    _IMAGENET_CFG.replace(mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_pct=0.9),
                    {"fb_in1k": _timm_deit(f"{timm_name}.fb_in1k")},
                    description=f"DeiT-{size.upper()}/16{' with distillation token' if distilled else ''}, same shapes as timm's {timm_name}",
                    timm_name=timm_name,
                )
            )
    return models


# ----------------------------------------------------------------------------- today's families
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI's CLIP statistics (timm: OPENAI_CLIP_MEAN)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _timm_release(
    timm_name: str,
    description: str,
    *,
    mean: tuple[float, ...] = IMAGENET_MEAN,
    std: tuple[float, ...] = IMAGENET_STD,
    crop_pct: float = 0.9,
    num_classes: int = 0,
    img_size: int = 224,
    license: str = "apache-2.0",
    **kw: Any,
) -> PretrainedCfg:
    """A release on timm's hub (`timm/<arch>.<tag>`), preprocessed as timm's pretrained_cfg of that
    tag says (bicubic, centre crop); tests/test_zoo.py checks every field against timm's own."""
    return PretrainedCfg(
        source=f"hf-hub:timm/{timm_name}",
        input_size=(3, img_size, img_size),
        mean=mean,
        std=std,
        crop_pct=crop_pct,
        interpolation="bicubic",
        num_classes=num_classes,
        license=license,
        description=description,
        **kw,
    )


def _without_weights(cfg: PretrainedCfg) -> PretrainedCfg:
    """A release's preprocessing, for the same architecture built without its weights."""
    return PretrainedCfg(
        input_size=cfg.input_size,
        mean=cfg.mean,
        std=cfg.std,
        interpolation=cfg.interpolation,
        crop_pct=cfg.crop_pct,
        crop_mode=cfg.crop_mode,
        num_classes=cfg.num_classes,
    )


def _family(
    name: str,
    config: ViTConfig,
    timm_name: str,
    sources: dict[str, PretrainedCfg],
    description: str,
) -> ZooModel:
    default = next(iter(sources.values()))
    return ZooModel(name, config, _without_weights(default), sources, description, timm_name=timm_name)


def _family_models() -> list[ZooModel]:
    """DeiT III, DINO, MAE, DINOv2 (with registers), CLIP and SigLIP: the ViTs people use today as
    classifiers and as backbones. Self-supervised and image-text weights have no classifier:
    num_classes=0 gives the pooled feature (CLIP: its projection into the 512-d joint space)."""
    models = []
    for size, timm_size, dim, heads in (("s", "small", 384, 6), ("b", "base", 768, 12)):
        vit = ViTConfig(img_size=224, patch_size=16, embed_dim=dim, depth=12, num_heads=heads)
        deit3 = f"deit3_{timm_size}_patch16_224"
        models.append(
            _family(
                f"deit3_{size}16",
                vit.replace(init_values=1e-6, no_embed_class=True),
                deit3,
                {
                    "fb_in1k": _timm_release(
                        f"{deit3}.fb_in1k",
                        "DeiT III (Touvron et al. 2022), ImageNet-1k, Facebook release",
                        num_classes=1000,
                        label_set="imagenet-1k",
                    )
                },
                f"DeiT III-{size.upper()}/16: LayerScale, positions on the patches only; same shapes as timm's {deit3}",
            )
        )
        plain = f"vit_{timm_size}_patch16_224"
        models.append(
            _family(
                f"dino_{size}16",
                vit.replace(num_classes=0),
                plain,
                {"dino": _timm_release(f"{plain}.dino", "DINO self-supervised (Caron et al. 2021), ImageNet-1k")},
                f"DINO ViT-{size.upper()}/16 feature extractor (a plain ViT, no classifier)",
            )
        )
        for reg in ("", "_reg4"):
            dinov2 = f"vit_{timm_size}_patch14{reg}_dinov2"
            config = ViTConfig(
                img_size=518, patch_size=14, embed_dim=dim, depth=12, num_heads=heads, init_values=1e-5, num_classes=0
            )
            if reg:
                config = config.replace(reg_tokens=4, no_embed_class=True)
            paper = "Darcet et al. 2024, 4 registers" if reg else "Oquab et al. 2023"
            models.append(
                _family(
                    f"dinov2_{size}14{'_reg' if reg else ''}",
                    config,
                    dinov2,
                    {
                        "lvd142m": _timm_release(
                            f"{dinov2}.lvd142m", f"DINOv2 ({paper}), LVD-142M", img_size=518, crop_pct=1.0
                        )
                    },
                    f"DINOv2 ViT-{size.upper()}/14{' with 4 register tokens' if reg else ''} feature extractor at 518 px",
                )
            )
    models.append(
        _family(
            "mae_b16",
            ViTConfig(num_classes=0),
            "vit_base_patch16_224",
            {
                "mae": _timm_release(
                    "vit_base_patch16_224.mae",
                    "MAE self-supervised pretraining (He et al. 2022), ImageNet-1k",
                    license="cc-by-nc-4.0",
                )
            },
            "MAE ViT-B/16 encoder, pretrained without labels (no classifier)",
        )
    )
    models.append(
        _family(
            "clip_b16",
            # OpenAI trained CLIP with QuickGELU; the LAION weights of the same shapes with exact GELU.
            ViTConfig(pre_norm=True, patch_bias=False, norm_eps=1e-5, act_layer="quick_gelu", num_classes=512),
            "vit_base_patch16_clip_224",
            {
                "openai": _timm_release(
                    "vit_base_patch16_clip_224.openai",
                    "OpenAI CLIP (Radford et al. 2021) image tower",
                    mean=CLIP_MEAN,
                    std=CLIP_STD,
                    num_classes=512,
                ),
                "laion2b": _timm_release(
                    "vit_base_patch16_clip_224.laion2b",
                    "OpenCLIP (Cherti et al. 2023) image tower, LAION-2B",
                    mean=CLIP_MEAN,
                    std=CLIP_STD,
                    num_classes=512,
                    crop_pct=1.0,
                    model_args={"act_layer": "gelu"},
                ),
            },
            "CLIP ViT-B/16 image tower: LayerNorm before the blocks, a projection to the 512-d image-text space",
        )
    )
    models.append(
        _family(
            "siglip_b16",
            ViTConfig(class_token=False, global_pool="map", num_classes=0),
            "vit_base_patch16_siglip_224",
            {
                "webli": _timm_release(
                    "vit_base_patch16_siglip_224.webli",
                    "SigLIP (Zhai et al. 2023) image tower, WebLI",
                    mean=INCEPTION_MEAN,
                    std=INCEPTION_STD,
                )
            },
            "SigLIP ViT-B/16 image tower: no class token, attention pooling (768-d embedding)",
        )
    )
    return models


MODELS: tuple[ZooModel, ...] = (*_mnist_models(), *_vit_models(), *_deit_models(), *_family_models())
