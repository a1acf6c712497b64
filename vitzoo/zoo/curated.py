"""The curated named models, written by hand: each one a config (shapes identical to timm's where
timm has it), its preprocessing, the pretrained sources it knows and its timm counterpart. The
releases a family rule states come from the generated table (timm_releases.py); vitzoo/zoo/__init__.py
joins the two into `MODELS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..layers.swiglu import dinov2_swiglu_hidden_dim, packed_mlp_ratio
from ..model import ViTConfig
from ..pretrained_cfg import (
    CLIP_MEAN,
    CLIP_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    INCEPTION_MEAN,
    INCEPTION_STD,
    MNIST_MEAN,
    MNIST_STD,
    PretrainedCfg,
)
from .timm_archs import arch_config


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


def _augreg(timm_name: str, description: str) -> PretrainedCfg:
    """A timm hub release of Google's AugReg weights (inputs normalised to [-1, 1])."""
    return _timm_release(
        timm_name, description, mean=INCEPTION_MEAN, std=INCEPTION_STD, num_classes=1000, label_set="imagenet-1k"
    )


def _deit(timm_name: str) -> PretrainedCfg:
    # crop_pct 0.9 is what timm's release of these weights states in its config.json (the DeiT
    # paper evaluated at 0.875); the source's own config wins, so the two must agree.
    return _timm_release(
        timm_name,
        "DeiT (Touvron et al. 2021), ImageNet-1k, Facebook release",
        num_classes=1000,
        label_set="imagenet-1k",
    )


_IN1K = "ImageNet-21k pretrain, ImageNet-1k fine-tune (AugReg, Steiner et al. 2021)"
_NAFLEX_IN1K = "timm's NaFlexVit, ImageNet-1k, 300 epochs at a budget of 576 patches"
_NAFLEX_SIGLIP2 = "SigLIP 2 (Tschannen et al. 2025) NaFlex image tower, WebLI"
_IMAGENET_CFG = PretrainedCfg()  # preprocessing for models without weights: 224, [-1, 1]
_DEIT_CFG = _IMAGENET_CFG.replace(mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_pct=0.9)
_NAFLEX_CFG = PretrainedCfg(input_size=(3, 384, 384), crop_pct=1.0)  # timm's NaFlexVit without weights
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
    family: str = ""  # "vit", "clip", "dinov2", ... (zoo/families.py names each by a rule)


def _released(
    name: str, config: ViTConfig, timm_name: str, sources: dict[str, PretrainedCfg], description: str
) -> ZooModel:
    """A model whose preprocessing without weights is that of its default (first) source."""
    default = next(iter(sources.values()))
    return ZooModel(name, config, default.without_weights(), sources, description, timm_name=timm_name)


# EVA-02's MLPs: SwiGLU of hidden width int(dim * 8/3); T/S pack gate and input into one fc1
# (twice as wide), B/L keep them apart with a LayerNorm of the hidden units and separate q/k/v.
_EVA02_PACKED: dict[str, Any] = {"mlp_layer": "swiglu_packed", "mlp_ratio": 16 / 3}
_EVA02_SUBLN: dict[str, Any] = {"mlp_layer": "swiglu", "mlp_ratio": 8 / 3, "mlp_norm": True, "qkv_fused": False}
_EVA02_IN22K = (("mim_in22k", "ImageNet-22k"),)
_ROPE_VIT: tuple[tuple[str, str, Literal["cat", "mixed"], float, str], ...] = (
    ("vit_b16_rope", "vit_base_patch16_rope_224", "cat", 100.0, "axial RoPE"),
    ("vit_b16_rope_mixed", "vit_base_patch16_rope_mixed_224", "mixed", 10.0, "RoPE-Mixed"),
)
_PE_CORE_POOL: dict[str, Any] = {"global_pool": "map", "attn_pool_num_heads": 8, "pool_include_prefix": True}
_PE_SPATIAL_POOL: dict[str, Any] = {"global_pool": "avg", "final_norm": False}
_PE_CORE = "attention pooling over every token, a projection into the image-text space"
_PE_SPATIAL = "dense patch features (no final norm), averaged as the pooled feature"

# DINOv3's sizes: vitzoo's name -> timm's; DINOv3's satellite-imagery weights are normalised by their own statistics.
_DINOV3_TIMM = {"s": "small", "s_plus": "small_plus", "b": "base", "l": "large", "h_plus": "huge_plus", "7b": "7b"}
_SAT_MEAN, _SAT_STD = (0.430, 0.411, 0.296), (0.213, 0.156, 0.143)


def _dinov3_family(
    size: str, dim: int, depth: int, heads: int, *, sat: bool = False, qkvb: bool = True, **fields: Any
) -> list[ZooModel]:
    """DINOv3 at one size: `dinov3_{size}16` and, where timm has it, `dinov3_{size}16_qkvb`, each
    with its timm hub releases (LVD-1689M, and SAT-493M where released)."""
    models = []
    for bias in (False, True) if qkvb else (False,):
        timm_name = f"vit_{_DINOV3_TIMM[size]}_patch16_dinov3" + ("_qkvb" if bias else "")
        sources = {"lvd1689m": _dinov3_release(f"{timm_name}.lvd1689m", "LVD-1689M (web images)")}
        if sat:
            sources["sat493m"] = _dinov3_release(
                f"{timm_name}.sat493m", "SAT-493M (satellite images)", _SAT_MEAN, _SAT_STD
            )
        config = ViTConfig(
            img_size=256,
            patch_size=16,
            embed_dim=dim,
            depth=depth,
            num_heads=heads,
            num_classes=0,
            qkv_bias=bias,
            k_bias=not bias,
            init_values=1e-5,
            reg_tokens=4,
            pos_embed="none",
            rope="dinov3",
            rope_temperature=100.0,
            rope_rotate_half=True,
            dynamic_img_size=True,
            norm_eps=1e-5,
            global_pool="avg",
        ).replace(**({"act_layer": "silu"} if fields.get("mlp_layer") else {}), **fields)
        what = f"DINOv3 ViT-{size.replace('_plus', '+').upper()}/16" + (" (q, v biases)" if bias else "")
        models.append(
            _released(
                f"dinov3_{size}16" + ("_qkvb" if bias else ""),
                config,
                timm_name,
                sources,
                f"{what} backbone: rotary positions, 4 registers; mean of the patch tokens (global_pool='token': the class token)",
            )
        )
    return models


def _dinov3_release(
    timm_name: str, data: str, mean: tuple[float, ...] = IMAGENET_MEAN, std: tuple[float, ...] = IMAGENET_STD
) -> PretrainedCfg:
    """A DINOv3 release on timm's hub: gated, under Meta's DINOv3 License (accept it on the Hub first)."""
    return _timm_release(
        timm_name,
        f"DINOv3 (Simeoni et al. 2025), {data}; DINOv3 License, gated on the Hub",
        mean=mean,
        std=std,
        crop_pct=1.0,
        img_size=256,
        license="dinov3-license",
    )


def _siglip(timm_name: str, description: str, img_size: int, *, own_size: bool = False) -> PretrainedCfg:
    """A SigLIP / SigLIP 2 image tower release (WebLI, inputs normalised to [-1, 1]) at `img_size`;
    `own_size`: a tag whose size differs from its name's, so it builds its own position grid."""
    return _timm_release(
        timm_name,
        f"{description}, {img_size} px",
        mean=INCEPTION_MEAN,
        std=INCEPTION_STD,
        img_size=img_size,
        model_args={"img_size": img_size} if own_size else {},
    )


def _siglip2_tags(arch: str, sizes: tuple[int, ...], tanh: tuple[int, ...] = ()) -> dict[str, PretrainedCfg]:
    """SigLIP 2's releases of one architecture at each input size: the first size is tag
    `v2_webli`, the others `v2_webli_<size>` (a position table of that grid); `tanh`: the sizes
    whose timm architecture has tanh GELU where the first's has the exact one (L/16 at 512 px)."""
    description = "SigLIP 2 (Tschannen et al. 2025) image tower, WebLI"
    tags = {
        "v2_webli" if i == 0 else f"v2_webli_{size}": _siglip(
            f"{arch}_{size}.v2_webli", description, size, own_size=i > 0
        )
        for i, size in enumerate(sizes)
    }
    for size in tanh:
        cfg = tags[f"v2_webli_{size}"]
        tags[f"v2_webli_{size}"] = cfg.replace(model_args={**cfg.model_args, "act_layer": "gelu_tanh"})
    return tags


def _dinov2(timm_name: str, registers: bool) -> dict[str, PretrainedCfg]:
    description = (
        "DINOv2 (Darcet et al. 2024, 4 registers), LVD-142M" if registers else "DINOv2 (Oquab et al. 2023), LVD-142M"
    )
    return {"lvd142m": _timm_release(f"{timm_name}.lvd142m", description, img_size=518, crop_pct=1.0)}


def _radio(timm_name: str, version: str) -> dict[str, PretrainedCfg]:
    return {
        "c_radio": _timm_release(
            f"{timm_name}.c_radio",
            f"C-RADIO{version} (NVIDIA, Heinrich et al.), agglomerated from several teachers; NVIDIA Open Model License",
            mean=CLIP_MEAN,
            std=CLIP_STD,
            crop_pct=1.0,
            img_size=512,
            license="nvidia-open-model-license",
        )
    }


def _nvidia_radio(repo: str, version: str) -> PretrainedCfg:
    """NVIDIA's own release of C-RADIO (`nvidia/<repo>`: transformers' `radio` type, NVIDIA's tensor
    names; the adaptor heads left out), the same weights as timm's `c_radio` tag, preprocessed as it."""
    return _radio(repo, version)["c_radio"].replace(
        source=f"hf-hub:nvidia/{repo}",
        description=f"C-RADIO{version} (NVIDIA, Heinrich et al.) as NVIDIA publishes it (nvidia/{repo}); NVIDIA Open Model License",
    )


_SIGLIP = ViTConfig(class_token=False, global_pool="map", num_classes=0)  # SigLIP B/16
_SO400M = _SIGLIP.replace(embed_dim=1152, depth=27, num_heads=16, mlp_ratio=3.7362)  # SigLIP's shape-optimised width
_DINOV2_L = ViTConfig(
    img_size=518, patch_size=14, embed_dim=1024, depth=24, num_heads=16, init_values=1e-5, num_classes=0
)
_DINOV2_G = _DINOV2_L.replace(
    embed_dim=1536,
    depth=40,
    num_heads=24,
    mlp_layer="swiglu_packed",
    act_layer="silu",
    mlp_ratio=2.66667 * 2,  # timm's ratio: fc1 holds gate and input, each DINOv2's SwiGLU width
)
_CLIP_L14 = ViTConfig(
    patch_size=14,
    embed_dim=1024,
    depth=24,
    num_heads=16,
    pre_norm=True,
    patch_bias=False,
    norm_eps=1e-5,
    act_layer="quick_gelu",
    num_classes=768,
)
# timm's NaFlexVit: no class token, a learned table of the patches only (a square grid), resized per image
# (patch-sequence batches) or per input size (dynamic_img_size).
_NAFLEX = ViTConfig(
    img_size=256, class_token=False, no_embed_class=True, dynamic_img_size=True, init_values=1e-5, global_pool="avg"
)
_NAFLEX_SIGLIP = _SIGLIP.replace(img_size=256, act_layer="gelu_tanh", dynamic_img_size=True, pos_resample="siglip2")


def _naflex_release(timm_name: str, description: str, num_classes: int = 1000) -> PretrainedCfg:
    """A timm NaFlexVit release: evaluated at 384 px (any size: its table is resized), [-1, 1]."""
    label = {"label_set": "imagenet-1k"} if num_classes == 1000 else {}
    return _timm_release(
        timm_name,
        description,
        mean=INCEPTION_MEAN,
        std=INCEPTION_STD,
        crop_pct=1.0,
        img_size=384,
        num_classes=num_classes,
        **label,
    )


def _siglip2_naflex(repo: str, size: str) -> dict[str, PretrainedCfg]:
    """Google's SigLIP 2 NaFlex release (transformers' Siglip2Model, text tower included): a patch
    budget of 256 per image, each image resized to the most patches that fit at its aspect ratio."""
    return {
        "v2_webli": PretrainedCfg(
            source=f"hf-hub:google/{repo}",
            input_size=(3, 256, 256),
            mean=INCEPTION_MEAN,
            std=INCEPTION_STD,
            interpolation="bilinear",
            crop_pct=1.0,
            crop_mode="squash",
            num_classes=0,
            license="apache-2.0",
            description=f"SigLIP 2 (Tschannen et al. 2025) NaFlex {size}, WebLI: native aspect ratio, 256 patches",
            max_patches=256,
        )
    }


# Meta's SAM 3 (facebook/sam3, gated on the Hub, SAM License): the whole model in transformers' layout,
# read for its image encoder's trunk (keymaps.py SAM3_RULES); Sam3ImageProcessor's resize to 1008, mean/std 0.5.
_SAM3_CFG = PretrainedCfg(
    source="hf-hub:facebook/sam3",
    input_size=(3, 1008, 1008),
    mean=INCEPTION_MEAN,
    std=INCEPTION_STD,
    interpolation="bilinear",
    crop_pct=1.0,
    crop_mode="squash",
    num_classes=0,
    license="sam-license",
    description="SAM 3 (Meta, 2025) image encoder; SAM License, gated on the Hub",
)


# timm's aimv2_large_patch14_224 (the generated table's), as the LiT release's vision tower
_AIMV2_L14 = arch_config("aimv2_large_patch14_224").replace(img_size=224)
_AIMV2_LIT = PretrainedCfg(  # its preprocessor_config.json: CLIP's, 224 px shortest edge and centre crop, bicubic
    source="hf-hub:apple/aimv2-large-patch14-224-lit",
    input_size=(3, 224, 224),
    mean=CLIP_MEAN,
    std=CLIP_STD,
    crop_pct=1.0,
    interpolation="bicubic",
    num_classes=768,
    license="apple-amlr",  # the model card's since its AMLR commit (earlier apple-ascl)
    description="AIMv2-L/14 LiT (Fini et al. 2024, Apple): LiT-tuned image tower, zero-shot with its text tower",
)
# RADIO: the first of its summary tokens is the class token, the others are registers; no final norm.
_RADIO = ViTConfig(img_size=512, num_classes=0, reg_tokens=7, no_embed_class=True, final_norm=False)


# ----------------------------------------------------------------------------- Pixio, Web-SSL
# Meta's transformers-layout releases (hf-hub:facebook/<repo>): the repository's config.json and
# preprocessor_config.json decide at load; these are the architectures their code states.
# Pixio (Yang et al. 2025, facebookresearch/pixio): MAE's ViT at 256 px with 8 class tokens, each
# with a position: vitzoo's class token and 7 registers, pooled by their mean (PixioModel's
# pooler_output); FAIR Noncommercial Research License, gated on the Hub.
_PIXIO_SIZES = (
    ("b16", 768, 12, 12),
    ("l16", 1024, 24, 16),
    ("h16", 1280, 32, 16),
    ("1b16", 1536, 48, 24),
    ("5b16", 3072, 48, 32),
)


def _pixio_models() -> list[ZooModel]:
    models = []
    for size, dim, depth, heads in _PIXIO_SIZES:
        config = ViTConfig(
            img_size=256,
            embed_dim=dim,
            depth=depth,
            num_heads=heads,
            num_classes=0,
            reg_tokens=7,
            global_pool="prefix_avg",
            norm_eps=1e-6,
        )
        release = _meta_release(
            f"pixio-vit{size}",
            256,
            "fair-noncommercial-research-license",
            f"Pixio (Yang et al. 2025) ViT-{size[:-2].upper()}/16, MetaCLIP-2B; FAIR Noncommercial Research License, gated",
            crop_pct=1.0,
            crop_mode="squash",
        )
        what = f"Pixio ViT-{size[:-2].upper()}/16 at 256 px: 8 class tokens (the class token and 7 registers), their mean pooled"
        models.append(ZooModel(f"pixio_{size}", config, release.without_weights(), {"fb": release}, what))
    return models


# Web-SSL (Fan et al. 2025, facebookresearch/webssl): Web-DINO, transformers' dinov2 type (SwiGLU MLP,
# LayerScale, no registers), and Web-MAE, its vit type (MAE's encoder; patch 14, but 16 for MAE-300M
# as webssl's mae.py builds it), trained on MetaCLIP-2B (light / heavy: its text-filtered subsets)
# or 8B images; CC-BY-NC 4.0.
# name -> (width, depth, heads, releases: tag -> (repo, size))
_WEBSSL_DINO: dict[str, tuple[int, int, int, dict[str, tuple[str, int]]]] = {
    "300m": (1024, 24, 16, {"full2b": ("dino300m-full2b-224", 224)}),
    "1b": (1536, 40, 24, {"full2b": ("dino1b-full2b-224", 224)}),
    "2b": (2688, 24, 21, {t: (f"dino2b-{t}-224", 224) for t in ("full2b", "light2b", "heavy2b")}),
    "3b": (3072, 26, 24, {t: (f"dino3b-{t}-224", 224) for t in ("full2b", "light2b", "heavy2b")}),
    "5b": (3584, 32, 28, {"full2b": ("dino5b-full2b-224", 224)}),
    "7b": (4096, 32, 32, {"full8b" if s == 224 else f"full8b_{s}": (f"dino7b-full8b-{s}", s) for s in (224, 378, 518)}),
}
_WEBSSL_MAE: dict[str, tuple[int, int, int, int]] = {  # name -> (patch, width, depth, heads)
    "300m": (16, 1024, 24, 16),
    "700m": (14, 1280, 32, 16),
    "1b": (14, 1536, 40, 24),
    "2b": (14, 2688, 24, 21),
    "3b": (14, 3072, 26, 24),
}


def _meta_release(repo: str, size: int, license: str, description: str, **kw: Any) -> PretrainedCfg:
    """A feature extractor on Meta's Hub account (hf-hub:facebook/<repo>): bicubic, ImageNet statistics."""
    return PretrainedCfg(
        source=f"hf-hub:facebook/{repo}",
        input_size=(3, size, size),
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        interpolation="bicubic",
        num_classes=0,
        license=license,
        description=description,
        **kw,
    )


def _webssl_release(repo: str, size: int, what: str, own_size: bool) -> PretrainedCfg:
    """A Web-SSL repository: resized to size / 0.875 and centre-cropped (its README's transform)."""
    description = f"Web-SSL (Fan et al. 2025) {what}, facebook/webssl-{repo}; CC-BY-NC 4.0"
    args = {"img_size": size} if own_size else {}
    return _meta_release(f"webssl-{repo}", size, "cc-by-nc-4.0", description, crop_pct=0.875, model_args=args)


def _webssl_models() -> list[ZooModel]:
    models = []
    for name, (dim, depth, heads, tags) in _WEBSSL_DINO.items():
        mlp_ratio = packed_mlp_ratio(dim, dinov2_swiglu_hidden_dim(dim, 4.0))  # DINOv2-g's SwiGLU rule
        config = _DINOV2_L.replace(img_size=224, embed_dim=dim, depth=depth, num_heads=heads, mlp_ratio=mlp_ratio)
        config = config.replace(mlp_layer="swiglu_packed", act_layer="silu")
        what = f"Web-DINO {name.upper()}/14"
        sources = {tag: _webssl_release(repo, s, what, s != 224) for tag, (repo, s) in tags.items()}
        default = next(iter(sources.values())).without_weights()
        models.append(ZooModel(f"webssl_dino{name}14", config, default, sources, f"{what} (DINOv2 SwiGLU, LayerScale)"))
    for name, (patch, dim, depth, heads) in _WEBSSL_MAE.items():
        config = ViTConfig(patch_size=patch, embed_dim=dim, depth=depth, num_heads=heads, num_classes=0, norm_eps=1e-6)
        what = f"Web-MAE {name.upper()}/{patch}"
        release = _webssl_release(f"mae{name}-full2b-224", 224, what, False)
        models.append(
            ZooModel(f"webssl_mae{name}{patch}", config, release.without_weights(), {"full2b": release}, what)
        )
    return models


# Releases asked for by name that vitzoo refuses, and what is missing: `vitzoo.create` names the reason.
REFUSED_RELEASES: dict[str, str] = {
    "radio_so400m16.nvidia": (
        "NVIDIA's own C-RADIOv4-SO400M repository (nvidia/C-RADIOv4-SO400M) states NVIDIA's remote-code "
        "RADIO config (RADIOModel through trust_remote_code, its ViT named by args.model), not transformers' "
        "RadioModel config (model_type 'radio', as nvidia/C-RADIOv4-H's), and vitzoo has no reader for that "
        "config; timm's release of C-RADIOv4 So400m/16 loads as radio_so400m16.c_radio"
    ),
}

# Every built-in model, one entry per name. DeiT III, DINO, MAE, DINOv2 (with registers), CLIP and
# SigLIP are the ViTs people use today as classifiers and as backbones: self-supervised and
# image-text weights have no classifier, num_classes=0 gives the pooled feature (CLIP: its
# projection into the 512-d joint space).
CURATED: tuple[ZooModel, ...] = (
    # ------------------------------------------------------------------------- MNIST
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
    # ------------------------------------------------------------------------- ViT
    ZooModel(
        "vit_ti16",
        ViTConfig(img_size=224, patch_size=16, embed_dim=192, depth=12, num_heads=3),
        _IMAGENET_CFG,
        {"augreg_in21k_ft_in1k": _augreg("vit_tiny_patch16_224.augreg_in21k_ft_in1k", _IN1K)},
        description="ViT at 224, same shapes as timm's vit_tiny_patch16_224",
        timm_name="vit_tiny_patch16_224",
    ),
    ZooModel(
        "vit_s16",
        ViTConfig(img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=6),
        _IMAGENET_CFG,
        {"augreg_in21k_ft_in1k": _augreg("vit_small_patch16_224.augreg_in21k_ft_in1k", _IN1K)},
        description="ViT at 224, same shapes as timm's vit_small_patch16_224",
        timm_name="vit_small_patch16_224",
    ),
    ZooModel(
        "vit_b16",
        ViTConfig(img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12),
        _IMAGENET_CFG,
        {  # timm's default for ViT-B/16 is the re-tuned AugReg2 release
            "augreg2_in21k_ft_in1k": _augreg("vit_base_patch16_224.augreg2_in21k_ft_in1k", _IN1K + ", AugReg2"),
            "augreg_in21k_ft_in1k": _augreg("vit_base_patch16_224.augreg_in21k_ft_in1k", _IN1K),
        },
        description="ViT at 224, same shapes as timm's vit_base_patch16_224",
        timm_name="vit_base_patch16_224",
    ),
    ZooModel(
        "vit_b32",
        ViTConfig(img_size=224, patch_size=32, embed_dim=768, depth=12, num_heads=12),
        _IMAGENET_CFG,
        {"augreg_in21k_ft_in1k": _augreg("vit_base_patch32_224.augreg_in21k_ft_in1k", _IN1K)},
        description="ViT at 224, same shapes as timm's vit_base_patch32_224",
        timm_name="vit_base_patch32_224",
    ),
    ZooModel(
        "vit_l16",
        ViTConfig(img_size=224, patch_size=16, embed_dim=1024, depth=24, num_heads=16),
        _IMAGENET_CFG,
        {"augreg_in21k_ft_in1k": _augreg("vit_large_patch16_224.augreg_in21k_ft_in1k", _IN1K)},
        description="ViT at 224, same shapes as timm's vit_large_patch16_224",
        timm_name="vit_large_patch16_224",
    ),
    ZooModel(
        "vit_b16_in21k",
        ViTConfig(
            img_size=224,
            patch_size=16,
            embed_dim=768,
            depth=12,
            num_heads=12,
            num_classes=21843,
            representation_size=768,
        ),
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
    ),
    # ------------------------------------------------------------------------- DeiT
    ZooModel(
        "deit_ti16",
        ViTConfig(img_size=224, patch_size=16, embed_dim=192, depth=12, num_heads=3),
        _DEIT_CFG,
        {"fb_in1k": _deit("deit_tiny_patch16_224.fb_in1k")},
        description="DeiT-TI/16, same shapes as timm's deit_tiny_patch16_224",
        timm_name="deit_tiny_patch16_224",
    ),
    ZooModel(
        "deit_ti16_distilled",
        ViTConfig(img_size=224, patch_size=16, embed_dim=192, depth=12, num_heads=3, distilled=True),
        _DEIT_CFG,
        {"fb_in1k": _deit("deit_tiny_distilled_patch16_224.fb_in1k")},
        description="DeiT-TI/16 with distillation token, same shapes as timm's deit_tiny_distilled_patch16_224",
        timm_name="deit_tiny_distilled_patch16_224",
    ),
    ZooModel(
        "deit_s16",
        ViTConfig(img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=6),
        _DEIT_CFG,
        {"fb_in1k": _deit("deit_small_patch16_224.fb_in1k")},
        description="DeiT-S/16, same shapes as timm's deit_small_patch16_224",
        timm_name="deit_small_patch16_224",
    ),
    ZooModel(
        "deit_s16_distilled",
        ViTConfig(img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=6, distilled=True),
        _DEIT_CFG,
        {"fb_in1k": _deit("deit_small_distilled_patch16_224.fb_in1k")},
        description="DeiT-S/16 with distillation token, same shapes as timm's deit_small_distilled_patch16_224",
        timm_name="deit_small_distilled_patch16_224",
    ),
    ZooModel(
        "deit_b16",
        ViTConfig(img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12),
        _DEIT_CFG,
        {"fb_in1k": _deit("deit_base_patch16_224.fb_in1k")},
        description="DeiT-B/16, same shapes as timm's deit_base_patch16_224",
        timm_name="deit_base_patch16_224",
    ),
    ZooModel(
        "deit_b16_distilled",
        ViTConfig(img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, distilled=True),
        _DEIT_CFG,
        {"fb_in1k": _deit("deit_base_distilled_patch16_224.fb_in1k")},
        description="DeiT-B/16 with distillation token, same shapes as timm's deit_base_distilled_patch16_224",
        timm_name="deit_base_distilled_patch16_224",
    ),
    # ------------------------------------------------------------------------- DeiT III, DINO, DINOv2
    # (with and without registers): the small models, then the base ones
    _released(
        "deit3_s16",
        ViTConfig(
            img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=6, init_values=1e-6, no_embed_class=True
        ),
        "deit3_small_patch16_224",
        {
            "fb_in1k": _timm_release(
                "deit3_small_patch16_224.fb_in1k",
                "DeiT III (Touvron et al. 2022), ImageNet-1k, Facebook release",
                num_classes=1000,
                label_set="imagenet-1k",
            )
        },
        "DeiT III-S/16: LayerScale, positions on the patches only; same shapes as timm's deit3_small_patch16_224",
    ),
    _released(
        "dino_s16",
        ViTConfig(img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=6, num_classes=0),
        "vit_small_patch16_224",
        {"dino": _timm_release("vit_small_patch16_224.dino", "DINO self-supervised (Caron et al. 2021), ImageNet-1k")},
        "DINO ViT-S/16 feature extractor (a plain ViT, no classifier)",
    ),
    _released(
        "dinov2_s14",
        ViTConfig(img_size=518, patch_size=14, embed_dim=384, depth=12, num_heads=6, init_values=1e-5, num_classes=0),
        "vit_small_patch14_dinov2",
        {
            "lvd142m": _timm_release(
                "vit_small_patch14_dinov2.lvd142m", "DINOv2 (Oquab et al. 2023), LVD-142M", img_size=518, crop_pct=1.0
            )
        },
        "DINOv2 ViT-S/14 feature extractor at 518 px",
    ),
    _released(
        "dinov2_s14_reg",
        ViTConfig(
            img_size=518,
            patch_size=14,
            embed_dim=384,
            depth=12,
            num_heads=6,
            init_values=1e-5,
            num_classes=0,
            reg_tokens=4,
            no_embed_class=True,
        ),
        "vit_small_patch14_reg4_dinov2",
        {
            "lvd142m": _timm_release(
                "vit_small_patch14_reg4_dinov2.lvd142m",
                "DINOv2 (Darcet et al. 2024, 4 registers), LVD-142M",
                img_size=518,
                crop_pct=1.0,
            )
        },
        "DINOv2 ViT-S/14 with 4 register tokens feature extractor at 518 px",
    ),
    _released(
        "deit3_b16",
        ViTConfig(
            img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, init_values=1e-6, no_embed_class=True
        ),
        "deit3_base_patch16_224",
        {
            "fb_in1k": _timm_release(
                "deit3_base_patch16_224.fb_in1k",
                "DeiT III (Touvron et al. 2022), ImageNet-1k, Facebook release",
                num_classes=1000,
                label_set="imagenet-1k",
            )
        },
        "DeiT III-B/16: LayerScale, positions on the patches only; same shapes as timm's deit3_base_patch16_224",
    ),
    _released(
        "deit3_l16",
        ViTConfig(
            img_size=224, patch_size=16, embed_dim=1024, depth=24, num_heads=16, init_values=1e-6, no_embed_class=True
        ),
        "deit3_large_patch16_224",
        {
            "fb_in1k": _timm_release(
                "deit3_large_patch16_224.fb_in1k",
                "DeiT III (Touvron et al. 2022), ImageNet-1k, Facebook release",
                num_classes=1000,
                label_set="imagenet-1k",
            ),
            "fb_in22k_ft_in1k": _timm_release(
                "deit3_large_patch16_224.fb_in22k_ft_in1k",
                "DeiT III (Touvron et al. 2022), ImageNet-21k pretrain, ImageNet-1k fine-tune, Facebook release",
                num_classes=1000,
                label_set="imagenet-1k",
                crop_pct=1.0,
            ),
        },
        "DeiT III-L/16: LayerScale, positions on the patches only; same shapes as timm's deit3_large_patch16_224",
    ),
    _released(
        "dino_b16",
        ViTConfig(img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, num_classes=0),
        "vit_base_patch16_224",
        {"dino": _timm_release("vit_base_patch16_224.dino", "DINO self-supervised (Caron et al. 2021), ImageNet-1k")},
        "DINO ViT-B/16 feature extractor (a plain ViT, no classifier)",
    ),
    _released(
        "dinov2_b14",
        ViTConfig(img_size=518, patch_size=14, embed_dim=768, depth=12, num_heads=12, init_values=1e-5, num_classes=0),
        "vit_base_patch14_dinov2",
        {
            "lvd142m": _timm_release(
                "vit_base_patch14_dinov2.lvd142m", "DINOv2 (Oquab et al. 2023), LVD-142M", img_size=518, crop_pct=1.0
            )
        },
        "DINOv2 ViT-B/14 feature extractor at 518 px",
    ),
    _released(
        "dinov2_b14_reg",
        ViTConfig(
            img_size=518,
            patch_size=14,
            embed_dim=768,
            depth=12,
            num_heads=12,
            init_values=1e-5,
            num_classes=0,
            reg_tokens=4,
            no_embed_class=True,
        ),
        "vit_base_patch14_reg4_dinov2",
        {
            "lvd142m": _timm_release(
                "vit_base_patch14_reg4_dinov2.lvd142m",
                "DINOv2 (Darcet et al. 2024, 4 registers), LVD-142M",
                img_size=518,
                crop_pct=1.0,
            )
        },
        "DINOv2 ViT-B/14 with 4 register tokens feature extractor at 518 px",
    ),
    # DINOv2 L/14 and g/14 (g: a SwiGLU MLP, gate and input packed in fc1 as timm's SwiGLUPacked)
    _released(
        "dinov2_l14",
        _DINOV2_L,
        "vit_large_patch14_dinov2",
        _dinov2("vit_large_patch14_dinov2", registers=False),
        "DINOv2 ViT-L/14 feature extractor at 518 px",
    ),
    _released(
        "dinov2_l14_reg",
        _DINOV2_L.replace(reg_tokens=4, no_embed_class=True),
        "vit_large_patch14_reg4_dinov2",
        _dinov2("vit_large_patch14_reg4_dinov2", registers=True),
        "DINOv2 ViT-L/14 with 4 register tokens feature extractor at 518 px",
    ),
    _released(
        "dinov2_g14",
        _DINOV2_G,
        "vit_giant_patch14_dinov2",
        _dinov2("vit_giant_patch14_dinov2", registers=False),
        "DINOv2 ViT-g/14 feature extractor at 518 px (SwiGLU MLP)",
    ),
    _released(
        "dinov2_g14_reg",
        _DINOV2_G.replace(reg_tokens=4, no_embed_class=True),
        "vit_giant_patch14_reg4_dinov2",
        _dinov2("vit_giant_patch14_reg4_dinov2", registers=True),
        "DINOv2 ViT-g/14 with 4 register tokens feature extractor at 518 px (SwiGLU MLP)",
    ),
    # ------------------------------------------------------------------------- MAE
    _released(
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
    ),
    # ------------------------------------------------------------------------- CLIP
    _released(
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
    ),
    _released(
        "clip_l14",
        _CLIP_L14,
        "vit_large_patch14_clip_224",
        {
            "openai": _timm_release(
                "vit_large_patch14_clip_224.openai",
                "OpenAI CLIP (Radford et al. 2021) image tower",
                mean=CLIP_MEAN,
                std=CLIP_STD,
                num_classes=768,
                crop_pct=1.0,
            ),
            "laion2b": _timm_release(
                "vit_large_patch14_clip_224.laion2b",
                "OpenCLIP (Cherti et al. 2023) image tower, LAION-2B",
                mean=INCEPTION_MEAN,
                std=INCEPTION_STD,
                num_classes=768,
                crop_pct=1.0,
                model_args={"act_layer": "gelu"},
            ),
        },
        "CLIP ViT-L/14 image tower: LayerNorm before the blocks, a projection to the 768-d image-text space",
    ),
    _released(
        "clip_l14_336",
        _CLIP_L14.replace(img_size=336),
        "vit_large_patch14_clip_336",
        {
            "openai": _timm_release(
                "vit_large_patch14_clip_336.openai",
                "OpenAI CLIP (Radford et al. 2021) image tower, 336 px",
                mean=CLIP_MEAN,
                std=CLIP_STD,
                num_classes=768,
                crop_pct=1.0,
                img_size=336,
            )
        },
        "CLIP ViT-L/14 image tower at 336 px, a projection to the 768-d image-text space",
    ),
    # ------------------------------------------------------------------------- SigLIP
    _released(
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
    ),
    # ------------------------------------------------------------------------- RoPE: EVA-02, RoPE-ViT, PE
    # 2D rotary position embeddings (layers/rope.py). EVA-02: timm's "cat" RoPE rescaled to its
    # 16x16 pretraining grid beside the learned table, SwiGLU (packed for T/S, with EVA's
    # sub-LayerNorm and separate q/k/v projections for B/L), q and v biased but not k, average pooling.
    *(
        _released(
            f"eva02_{size}14",
            ViTConfig(
                patch_size=14,
                embed_dim=dim,
                depth=depth,
                num_heads=heads,
                num_classes=0,
                global_pool="avg",
                fc_norm=True,
                k_bias=False,
                act_layer="silu",
                rope="cat",
                rope_ref_feat_shape=(16, 16),
                **mlp,
            ),
            f"eva02_{timm_size}_patch14_224",
            {
                tag: _timm_release(
                    f"eva02_{timm_size}_patch14_224.{tag}",
                    f"EVA-02 (Fang et al. 2023) masked image modelling, {data}",
                    mean=CLIP_MEAN,
                    std=CLIP_STD,
                    license="mit",
                )
                for tag, data in tags
            },
            f"EVA-02-{size.upper()}/14 feature extractor: RoPE beside the learned positions, SwiGLU, average pooling",
        )
        for size, timm_size, dim, depth, heads, mlp, tags in (
            ("t", "tiny", 192, 12, 3, _EVA02_PACKED, _EVA02_IN22K),
            ("s", "small", 384, 12, 6, _EVA02_PACKED, _EVA02_IN22K),
            ("b", "base", 768, 12, 12, _EVA02_SUBLN, _EVA02_IN22K),
            ("l", "large", 1024, 24, 16, _EVA02_SUBLN, (*_EVA02_IN22K, ("mim_m38m", "Merged-38M"))),
        )
    ),
    # RoPE-ViT (Heo et al. 2024): a DeiT III-style ViT-B/16 whose only positions are rotary, axial
    # ("cat") or with learned frequencies per block and head ("mixed", rope.freqs).
    *(
        _released(
            name,
            ViTConfig(
                init_values=1e-5,
                pos_embed="none",
                rope=kind,
                rope_grid_indexing="xy",
                rope_temperature=temperature,
            ),
            timm_name,
            {
                "naver_in1k": _timm_release(
                    f"{timm_name}.naver_in1k",
                    f"RoPE-ViT (Heo et al. 2024), {what}, ImageNet-1k (NAVER AI)",
                    num_classes=1000,
                    label_set="imagenet-1k",
                )
            },
            f"RoPE-ViT-B/16, {what}: no absolute positions, class token, ImageNet-1k classifier",
        )
        for name, timm_name, kind, temperature, what in _ROPE_VIT
    ),
    # Perception Encoder (Bolya et al. 2025): CLIP-style pre-norm ViT with "cat" RoPE (offset 1,
    # (col, row) coordinates, rescaled to the pretraining grid) beside the learned table. Core: an
    # 8-head attention pool over every token and a projection into the image-text space; Spatial:
    # the patch tokens without a final norm, averaged.
    *(
        _released(
            name,
            ViTConfig(
                img_size=img,
                patch_size=patch,
                embed_dim=dim,
                depth=depth,
                num_heads=heads,
                num_classes=classes,
                pre_norm=True,
                patch_bias=False,
                norm_eps=1e-5,
                rope="cat",
                rope_grid_offset=1.0,
                rope_grid_indexing="xy",
                rope_ref_feat_shape=(img // patch, img // patch),
                **pool,
            ),
            timm_name,
            {
                "fb": _timm_release(
                    f"{timm_name}.fb",
                    f"Perception Encoder {kind} (Bolya et al. 2025), Meta",
                    mean=INCEPTION_MEAN,
                    std=INCEPTION_STD,
                    crop_pct=1.0,
                    img_size=img,
                    num_classes=classes,
                )
            },
            f"PE {kind} {size.upper()}/{patch} at {img} px: {what}",
        )
        for name, timm_name, kind, size, img, patch, dim, depth, heads, classes, pool, what in (
            *(
                (
                    f"pe_core_{s}",
                    f"vit_pe_core_{ts}_patch{p}_{img}",
                    "Core",
                    s,
                    img,
                    p,
                    d,
                    dp,
                    h,
                    c,
                    _PE_CORE_POOL,
                    _PE_CORE,
                )
                for s, ts, img, p, d, dp, h, c in (
                    ("t", "tiny", 384, 16, 192, 12, 3, 512),
                    ("s", "small", 384, 16, 384, 12, 6, 512),
                    ("b", "base", 224, 16, 768, 12, 12, 1024),
                    ("l", "large", 336, 14, 1024, 24, 16, 1024),
                )
            ),
            *(
                (
                    f"pe_spatial_{s}",
                    f"vit_pe_spatial_{ts}_patch{p}_{img}",
                    "Spatial",
                    s,
                    img,
                    p,
                    d,
                    dp,
                    h,
                    0,
                    _PE_SPATIAL_POOL,
                    _PE_SPATIAL,
                )
                for s, ts, img, p, d, dp, h in (
                    ("s", "small", 512, 16, 384, 12, 6),
                    ("b", "base", 512, 16, 768, 12, 12),
                    ("l", "large", 448, 14, 1024, 24, 16),
                )
            ),
        )
    ),
    # ------------------------------------------------------------------------- DINOv3
    # Simeoni et al. 2025: rotary positions (patch centres in [-1, 1], periods base 100) instead of
    # a position table, 4 registers, LayerScale, LayerNorm eps 1e-5; S+, H+ and 7B with a SwiGLU MLP.
    # timm pools the patch tokens (avg), which its pretrained cfg keeps; DINOv3's own embedding is the
    # class token: create(name, global_pool="token"). "_qkvb": the q and v biases of the original
    # checkpoints (zero in the released weights), the key's fixed at zero.
    *_dinov3_family("s", 384, 12, 6),
    *_dinov3_family("s_plus", 384, 12, 6, mlp_layer="swiglu", mlp_align=8),
    *_dinov3_family("b", 768, 12, 12),
    *_dinov3_family("l", 1024, 24, 16, sat=True),
    *_dinov3_family("h_plus", 1280, 32, 20, mlp_layer="swiglu", mlp_align=8),
    *_dinov3_family("7b", 4096, 40, 32, mlp_ratio=2.0, mlp_layer="swiglu", mlp_align=64, sat=True, qkvb=False),
    # ------------------------------------------------------------------------- SigLIP So400m, SigLIP 2
    _released(
        "siglip_so400m14",
        # the size is no multiple of the patch: big_vision's (and timm's) conv ignores the last pixels
        _SO400M.replace(img_size=384, patch_size=14, drop_remainder=True),
        "vit_so400m_patch14_siglip_384",
        {
            "webli": _siglip(
                "vit_so400m_patch14_siglip_384.webli", "SigLIP (Zhai et al. 2023) image tower, WebLI", 384
            ),
            "webli_224": _siglip(
                "vit_so400m_patch14_siglip_224.webli",
                "SigLIP (Zhai et al. 2023) image tower, WebLI",
                224,
                own_size=True,
            ),
        },
        "SigLIP So400m/14 image tower at 384 px: no class token, attention pooling (1152-d embedding)",
    ),
    # ------------------------------------------------------------------------- SigLIP 2
    # The SigLIP architecture with SigLIP 2's weights; each input size a tag (its own position grid).
    _released(
        "siglip2_b16",
        _SIGLIP,
        "vit_base_patch16_siglip_224",
        _siglip2_tags("vit_base_patch16_siglip", (224, 256, 384, 512)),
        "SigLIP 2 ViT-B/16 image tower: no class token, attention pooling (768-d embedding); 224-512 px tags",
    ),
    _released(
        "siglip2_l16",
        _SIGLIP.replace(img_size=256, embed_dim=1024, depth=24, num_heads=16),
        "vit_large_patch16_siglip_256",
        _siglip2_tags("vit_large_patch16_siglip", (256, 384, 512), tanh=(512,)),
        "SigLIP 2 ViT-L/16 image tower: attention pooling (1024-d embedding); 256-512 px tags",
    ),
    _released(
        "siglip2_so400m14",
        _SO400M.replace(patch_size=14),
        "vit_so400m_patch14_siglip_224",
        _siglip2_tags("vit_so400m_patch14_siglip", (224, 378)),
        "SigLIP 2 So400m/14 image tower: attention pooling (1152-d embedding); 224 and 378 px tags",
    ),
    _released(
        "siglip2_so400m16",
        _SO400M.replace(img_size=256, act_layer="gelu_tanh"),
        "vit_so400m_patch16_siglip_256",
        _siglip2_tags("vit_so400m_patch16_siglip", (256, 384, 512)),
        "SigLIP 2 So400m/16 image tower (tanh GELU): attention pooling (1152-d embedding); 256-512 px tags",
    ),
    # ------------------------------------------------------------------------- SigLIP 2 NaFlex
    # Native resolution: images of any aspect ratio as patch sequences (docs/naflex_model.md), the
    # square table resized bilinearly to each image's grid, as transformers does.
    ZooModel(
        "siglip2_b16_naflex",
        _NAFLEX_SIGLIP,
        next(iter(_siglip2_naflex("siglip2-base-patch16-naflex", "B/16").values())).without_weights(),
        _siglip2_naflex("siglip2-base-patch16-naflex", "B/16"),
        "SigLIP 2 NaFlex ViT-B/16 image tower (transformers' layout, text tower with text=True): any aspect "
        "ratio, 256 patches; attention pooling (768-d embedding)",
    ),
    ZooModel(
        "siglip2_so400m16_naflex",
        _NAFLEX_SIGLIP.replace(embed_dim=1152, depth=27, num_heads=16, mlp_ratio=4304 / 1152),
        next(iter(_siglip2_naflex("siglip2-so400m-patch16-naflex", "So400m/16").values())).without_weights(),
        _siglip2_naflex("siglip2-so400m-patch16-naflex", "So400m/16"),
        "SigLIP 2 NaFlex So400m/16 image tower (transformers' layout, text tower with text=True): any aspect "
        "ratio, 256 patches; attention pooling (1152-d embedding)",
    ),
    # ------------------------------------------------------------------------- timm's NaFlexVit
    # timm's architectures for patch-sequence batches (its `embeds.*` names: weights/keymaps.py).
    _released(
        "naflexvit_b16_gap",
        _NAFLEX.replace(reg_tokens=4, fc_norm=True, num_classes=1000),
        "naflexvit_base_patch16_gap",
        {"e300_s576_in1k": _naflex_release("naflexvit_base_patch16_gap.e300_s576_in1k", _NAFLEX_IN1K)},
        "timm's NaFlexVit-B/16: 4 registers, LayerScale, mean of the patches (fc_norm); any aspect ratio",
    ),
    _released(
        "naflexvit_b16_par_gap",
        _NAFLEX.replace(reg_tokens=4, fc_norm=True, num_classes=1000, pos_resample="timm_square"),
        "naflexvit_base_patch16_par_gap",
        {"e300_s576_in1k": _naflex_release("naflexvit_base_patch16_par_gap.e300_s576_in1k", _NAFLEX_IN1K)},
        "timm's NaFlexVit-B/16, aspect-preserving table (a square of the longer side, cropped); any aspect ratio",
    ),
    ZooModel(
        "naflexvit_b16_map",
        _NAFLEX.replace(reg_tokens=1, global_pool="map", num_classes=1000),
        _NAFLEX_CFG,
        description="timm's NaFlexVit-B/16 with attention pooling, 1 register (no released weights)",
        timm_name="naflexvit_base_patch16_map",
    ),
    _released(
        "naflexvit_b16_siglip",
        _NAFLEX_SIGLIP,
        "naflexvit_base_patch16_siglip",
        {"v2_webli": _naflex_release("naflexvit_base_patch16_siglip.v2_webli", _NAFLEX_SIGLIP2, 0)},
        "SigLIP 2 NaFlex ViT-B/16 image tower in timm's NaFlexVit layout: any aspect ratio",
    ),
    _released(
        "naflexvit_so400m16_siglip",
        _NAFLEX_SIGLIP.replace(embed_dim=1152, depth=27, num_heads=16, mlp_ratio=3.7362),
        "naflexvit_so400m_patch16_siglip",
        {"v2_webli": _naflex_release("naflexvit_so400m_patch16_siglip.v2_webli", _NAFLEX_SIGLIP2, 0)},
        "SigLIP 2 NaFlex So400m/16 image tower in timm's NaFlexVit layout: any aspect ratio",
    ),
    # ------------------------------------------------------------------------- RADIO
    # NVIDIA's C-RADIO as timm releases it: a ViT whose summary tokens are the class token and
    # registers, LayerScale (B, L), no final norm; the class token is the summary feature.
    _released(
        "radio_b16",
        _RADIO.replace(init_values=1e-5),
        "vit_base_patch16_radio_v3",
        _radio("vit_base_patch16_radio_v3", "v3"),
        "C-RADIOv3 ViT-B/16 backbone at 512 px (7 summary tokens, no final norm)",
    ),
    _released(
        "radio_l16",
        _RADIO.replace(embed_dim=1024, depth=24, num_heads=16, init_values=1e-5),
        "vit_large_patch16_radio_v3",
        _radio("vit_large_patch16_radio_v3", "v3"),
        "C-RADIOv3 ViT-L/16 backbone at 512 px (7 summary tokens, no final norm)",
    ),
    _released(
        "radio_h16",
        _RADIO.replace(embed_dim=1280, depth=32, num_heads=16),
        "vit_huge_patch16_radio_v3",
        _radio("vit_huge_patch16_radio_v3", "v3"),
        "C-RADIOv3 ViT-H/16 backbone at 512 px (7 summary tokens, no final norm)",
    ),
    _released(
        "radio_so400m16",
        _RADIO.replace(embed_dim=1152, depth=27, num_heads=16, mlp_ratio=4304 / 1152, reg_tokens=9),
        "vit_so400m_patch16_radio_v4",
        _radio("vit_so400m_patch16_radio_v4", "v4"),
        "C-RADIOv4 So400m/16 backbone at 512 px (9 summary tokens, no final norm)",
    ),
    _released(
        "vit_h16_radio_v4",
        _RADIO.replace(embed_dim=1280, depth=32, num_heads=16, reg_tokens=9),
        "vit_huge_patch16_radio_v4",
        {**_radio("vit_huge_patch16_radio_v4", "v4"), "nvidia": _nvidia_radio("C-RADIOv4-H", "v4")},
        "C-RADIOv4 ViT-H/16 backbone at 512 px (10 summary tokens, no final norm)",
    ),
    # ------------------------------------------------------------------------- SAM 3
    # SAM 3's image encoder trunk (transformers' Sam3ViTModel; no timm counterpart): windows of 24 but
    # in 4 global blocks, rotary positions per window (or grid), its 24 x 24 table tiled to the grid.
    ZooModel(
        "sam3_vit_l14",
        ViTConfig(
            img_size=1008,
            patch_size=14,
            embed_dim=1024,
            depth=32,
            num_heads=16,
            mlp_ratio=4736 / 1024,
            num_classes=0,
            class_token=False,
            global_pool="avg",
            final_norm=False,
            pre_norm=True,
            patch_bias=False,
            window_size=24,
            global_attn_indexes=(7, 15, 23, 31),
            window_rope=True,
            pos_resample="tile",
        ),
        _SAM3_CFG.without_weights(),
        {"fb": _SAM3_CFG},
        description="SAM 3 image encoder trunk (ViT-L/14 at 1008 px, 32 blocks, windowed with rotary positions); "
        "its backbone's tokens, without the FPN neck",
    ),
    # ------------------------------------------------------------------------- AIMv2 LiT
    # Apple's LiT-tuned AIMv2-L image tower: timm's AIMv2-L/14 trunk pooled by its attention-pooling
    # head (layers/aimv2_pool.py), then the projection to the 768-d joint space (transformers'
    # Aimv2Model get_image_features; Apple's remote-code names read too, keymaps.py). No timm counterpart.
    ZooModel(
        "aimv2_l14_lit",
        _AIMV2_L14.replace(global_pool="aimv2", num_classes=768, head_bias=False),
        _AIMV2_LIT.without_weights(),
        {"apple": _AIMV2_LIT},
        "AIMv2-L/14 LiT image tower (Apple): attention-pooling head and projection to the 768-d image-text space",
    ),
    *_pixio_models(),
    *_webssl_models(),
)
