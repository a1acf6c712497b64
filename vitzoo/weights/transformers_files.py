"""What a Hugging Face transformers checkpoint's files state, in vitzoo's terms: the architecture
(config.json), the labels (its id2label) and the evaluation preprocessing (preprocessor_config.json).

transformers writes a config.json with its model type and only some of its keys (older versions
drop the values equal to the config class's defaults), so each model type below carries its config
class's defaults; `tests/weights/test_families.py` checks them against transformers itself.

    model_type                          what vitzoo builds
    vit, deit, vit_mae                  the plain ViT (at transformers' own LayerNorm eps: norm_eps.py)
    dinov2                              LayerScale (init layerscale_value), MLP width hidden * mlp_ratio;
                                        use_swiglu_ffn (giant): SwiGLU, gate and input packed (swiglu.py)
    dinov2_with_registers               + register tokens; the position embedding covers only the
                                        patches (the class token's position is folded into it, keymaps.py)
    clip_vision_model, clip             CLIP's vision tower: LayerNorm before the blocks, no patch bias,
                                        the projection (visual_projection, no bias) as the head
    siglip_vision_model, siglip         SigLIP's vision tower: no class token, attention pooling ("map");
                                        an image_size no multiple of the patch (So400m/14 at 384) drops
                                        the pixels past the last whole patch, as its conv does
    siglip2_vision_model, siglip2       SigLIP 2 NaFlex's: the same, with a Linear patch embedding over
                                        (row, column, channel)-ordered patches (a convolution, keymaps.py)
                                        and a square position table of num_patches, built for the
                                        square image it covers (NaFlex resamples it per image, bilinear
                                        and antialiased; at another size vitzoo does so once, at load)
    dinov3_vit                          DINOv3: rotary positions (base rope_theta) and no position table,
                                        registers, LayerScale, q/k/v biases as query_bias / key_bias /
                                        value_bias say (the key's: zero), SwiGLU with use_gated_mlp;
                                        pooled by the class token (its pooler_output)
    sapiens2                            Sapiens2 (Sapiens2Model): DINOv3's rotary positions, registers and
                                        SwiGLU, with RMSNorm (rms_norm_eps), separate q/k/v projections,
                                        grouped-query attention (num_key_value_heads_per_layer, or the
                                        first/last full-attention rule), qk-norm per head (use_qk_norm)
                                        and LayerScale on the attention branch only

    aimv2_vision_model, aimv2           AIMv2 (Aimv2VisionModel): RMSNorm everywhere and after the patch
                                        embedding, no class token, SwiGLU; qkv_bias / mlp_bias say the
                                        attention's and the MLP's biases (out_proj's is qkv_bias);
                                        use_head: pooled by its attention-pooling head ("aimv2",
                                        layers/aimv2_pool.py: its pooler_output; Aimv2Model's
                                        visual_projection the head), else the tokens averaged; the
                                        sinusoidal is_native positions are refused

    sam_vision_model, sam               SAM's image encoder: no class token, windowed attention but in
                                        global_attn_indexes, decomposed relative positions (use_rel_pos),
                                        the conv neck to output_channels, pooled by averaging (layers/sam.py)
    sam3_vit_model, sam3_vision_model,  SAM 3's image encoder (Sam3ViTModel, the trunk): no class token,
    sam3, sam3_video                    separate q/k/v, LayerNorm before the blocks, windows but in
                                        global_attn_indexes with rotary positions of each block's window
                                        or grid (window_rope, base rope_theta), no final norm; built at
                                        image_size, its table (pretrain_image_size) tiled at load; what
                                        vitzoo returns is the backbone's last_hidden_state (Sam3VisionModel's
                                        too): the FPN neck (fpn_hidden_states) is left out
    beit, data2vec-vision               BEiT (BeitModel, Data2VecVisionModel): q and v biased, k not;
                                        a relative position table per block with
                                        use_relative_position_bias (layers/relpos_bias.py), a learned
                                        position table only with use_absolute_position_embeddings;
                                        LayerScale (layer_scale_init_value); use_mean_pooling: the mean
                                        of the patch tokens, then the pooler's LayerNorm (fc_norm; none
                                        in a model saved without its pooler), else the class token
                                        after the final norm. The table shared by every
                                        block (use_shared_relative_position_bias: the pre-training
                                        checkpoints) is refused

    pixio                               Pixio (PixioModel): MAE's ViT with n_cls_tokens class tokens, the
                                        first vitzoo's class token, the others registers, all with
                                        positions; pooled by their mean (global_pool "prefix_avg", its
                                        pooler_output); the table resampled to every input (bicubic)

    radio                               C-RADIO: the summary tokens are the class token and registers,
                                        positions on the patches only, LayerScale, no final norm; its
                                        position table is for max_img_size (cropped at load, CPE) and
                                        the model is built for image_size; norm_mean / norm_std are
                                        the preprocessing (RadioModel normalises inside)

A whole CLIP, SigLIP or AIMv2 model (text and vision, "clip" / "siglip" / "siglip2" / "aimv2") is read for
its vision_config, a whole SAM model ("sam") for its image encoder's; SAM 3's vision model, whole model
and video model ("sam3_vision_model", "sam3", "sam3_video") for their backbone_config (SUB_CONFIGS).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from ..checks import check_types
from ..layers.swiglu import dinov2_swiglu_hidden_dim, packed_mlp_ratio
from ..pretrained_cfg import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD, INCEPTION_MEAN, INCEPTION_STD
from .errors import WeightsFileError
from .files import checked_pretrained
from .norm_eps import NORM_EPS

# transformers' activation names -> ViTConfig.act_layer. "gelu_pytorch_tanh" is GELU's tanh
# approximation (SigLIP); "quick_gelu" is x * sigmoid(1.702 x) (OpenAI CLIP).
ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "quick_gelu": "quick_gelu", "silu": "silu"}


@dataclass(frozen=True)
class Family:
    """One transformers model type: its config class's defaults and what every model of it is."""

    defaults: dict[str, Any]  # config keys (transformers' names) -> the config class's default
    fixed: dict[str, Any] = field(default_factory=dict)  # ViTConfig fields every model of the type has
    mlp_from_ratio: bool = False  # the MLP width is hidden_size * mlp_ratio (DINOv2), not intermediate_size
    # transformers resamples these models' position embedding to every input size (DINOv2: trained
    # at 518, its processor crops 224), bicubic, with this antialiasing; None: it does not.
    position_antialias: bool | None = None


_VIT_DEFAULTS = dict(
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    image_size=224,
    patch_size=16,
    num_channels=3,
    qkv_bias=True,
    hidden_act="gelu",
    layer_norm_eps=NORM_EPS["vit"],
)
_DINOV2_DEFAULTS = dict(
    _VIT_DEFAULTS,
    patch_size=14,
    layer_norm_eps=NORM_EPS["dinov2"],
    mlp_ratio=4,
    layerscale_value=1.0,
    use_swiglu_ffn=False,
)
_CLIP_DEFAULTS = dict(
    _VIT_DEFAULTS, patch_size=32, hidden_act="quick_gelu", layer_norm_eps=NORM_EPS["clip"], projection_dim=512
)
_RADIO_DEFAULTS = dict(
    _VIT_DEFAULTS,
    hidden_size=1280,
    num_hidden_layers=32,
    num_attention_heads=16,
    layer_norm_eps=NORM_EPS["radio"],
    mlp_ratio=4.0,
    use_swiglu_ffn=False,
    layerscale_value=1.0,
    max_img_size=2048,
    num_cls_tokens=3,
    num_registers=7,
    norm_mean=list(CLIP_MEAN),
    norm_std=list(CLIP_STD),
)
_PIXIO_DEFAULTS = dict(
    {k: v for k, v in _VIT_DEFAULTS.items() if k != "intermediate_size"},
    hidden_size=1280,
    num_hidden_layers=32,
    num_attention_heads=16,
    image_size=256,
    layer_norm_eps=NORM_EPS["pixio"],
    mlp_ratio=4,
    n_cls_tokens=8,
)
_SIGLIP_DEFAULTS = dict(
    _VIT_DEFAULTS, hidden_act="gelu_pytorch_tanh", layer_norm_eps=NORM_EPS["siglip"], vision_use_head=True
)
_SIGLIP2_DEFAULTS = dict({k: v for k, v in _SIGLIP_DEFAULTS.items() if k != "image_size"}, num_patches=256)
_DPT_DEFAULTS = dict(_VIT_DEFAULTS, image_size=384, is_hybrid=False, backbone_config=None)
_TIPSV2_DEFAULTS = dict(
    _DINOV2_DEFAULTS,
    layer_norm_eps=NORM_EPS["tipsv2"],
    image_size=448,
    patch_size=14,
    num_register_tokens=1,
    apply_layernorm=True,
)
_INTERNVL_DEFAULTS = dict(
    {k: v for k, v in _VIT_DEFAULTS.items() if k != "qkv_bias"},
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    layer_norm_eps=NORM_EPS["internvit"],
    image_size=[448, 448],
    patch_size=[14, 14],
    attention_bias=False,
    use_qk_norm=False,
    norm_type="layer_norm",
    use_absolute_position_embeddings=True,
    layer_scale_init_value=0.1,
    use_mean_pooling=True,
)
_BEIT_DEFAULTS = dict(
    {k: v for k, v in _VIT_DEFAULTS.items() if k != "qkv_bias"},
    use_absolute_position_embeddings=False,
    use_relative_position_bias=False,
    use_shared_relative_position_bias=False,
    layer_scale_init_value=0.1,
    use_mean_pooling=True,
)
_DINOV3_DEFAULTS = dict(
    {k: v for k, v in _VIT_DEFAULTS.items() if k != "qkv_bias"},
    hidden_size=384,
    num_attention_heads=6,
    intermediate_size=1536,
    layer_norm_eps=NORM_EPS["dinov3"],
    rope_theta=100.0,
    query_bias=True,
    key_bias=False,
    value_bias=True,
    proj_bias=True,
    mlp_bias=True,
    layerscale_value=1.0,
    use_gated_mlp=False,
    num_register_tokens=0,
)
_AIMV2_DEFAULTS = dict(
    {k: v for k, v in _VIT_DEFAULTS.items() if k != "layer_norm_eps"},
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=8,
    intermediate_size=2816,
    patch_size=14,
    hidden_act="silu",
    rms_norm_eps=NORM_EPS["aimv2"],
    qkv_bias=False,
    mlp_bias=False,
    use_head=True,
    is_native=False,
)

_SAPIENS2_DEFAULTS = dict(
    {k: v for k, v in _DINOV3_DEFAULTS.items() if k != "layer_norm_eps"},
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    hidden_act="silu",
    key_bias=True,
    use_gated_mlp=True,
    num_register_tokens=8,
    rms_norm_eps=NORM_EPS["sapiens2"],
    use_qk_norm=True,
    num_key_value_heads_per_layer=None,
    num_key_value_attention_heads=8,
    num_first_full_attention_layers=8,
    num_last_full_attention_layers=8,
    pos_embed_shift=None,
    pos_embed_jitter=None,
    pos_embed_rescale=2.0,
)

_SAM_DEFAULTS = dict(
    {k: v for k, v in _VIT_DEFAULTS.items() if k != "intermediate_size"},
    image_size=1024,
    layer_norm_eps=NORM_EPS["sam"],
    mlp_ratio=4.0,
    mlp_dim=None,
    use_abs_pos=True,
    use_rel_pos=True,
    window_size=14,
    global_attn_indexes=[2, 5, 8, 11],
    output_channels=256,
)

# Sam3ViTConfig; its rope_parameters ({"rope_type": "axial", "rope_theta": ...}) read by _sam3_fields
_SAM3_DEFAULTS = dict(
    _VIT_DEFAULTS,
    hidden_size=1024,
    num_hidden_layers=32,
    num_attention_heads=16,
    intermediate_size=4736,
    image_size=1008,
    patch_size=14,
    layer_norm_eps=NORM_EPS["sam3"],
    window_size=24,
    global_attn_indexes=[7, 15, 23, 31],
    pretrain_image_size=336,
    rope_parameters=None,
    rope_theta=10000.0,
)

FAMILIES: dict[str, Family] = {
    "vit": Family(_VIT_DEFAULTS),
    "deit": Family(_VIT_DEFAULTS),
    "vit_mae": Family(_VIT_DEFAULTS),
    "vit_msn": Family(dict(_VIT_DEFAULTS, layer_norm_eps=NORM_EPS["vit_msn"])),
    # no class token: IJepaForImageClassification averages every token (its optional pooler, a
    # Linear on the first patch token, is no layer of vitzoo's: the tensors refuse it)
    "ijepa": Family(_VIT_DEFAULTS, fixed=dict(class_token=False, global_pool="avg", representation_size=None)),
    # DPT's ViT backbone (DPTModel; DPTFor... keep it under `dpt.`), its neck and heads left out;
    # DPT resamples its position table to every input (bilinear), the identity at image_size
    "dpt": Family(_DPT_DEFAULTS),
    "dinov2": Family(_DINOV2_DEFAULTS, mlp_from_ratio=True, position_antialias=False),
    "dinov2_with_registers": Family(
        dict(_DINOV2_DEFAULTS, patch_size=16, num_register_tokens=4),  # sic: 16, unlike Dinov2Config
        fixed=dict(no_embed_class=True),
        mlp_from_ratio=True,
        position_antialias=True,
    ),
    **{  # CLIP's vision tower, MetaCLIP 2's and Chinese-CLIP's (transformers' copies of CLIP's)
        name: Family(_CLIP_DEFAULTS, fixed=dict(pre_norm=True, patch_bias=False))
        for name in ("clip_vision_model", "metaclip_2_vision_model", "chinese_clip_vision_model")
    },
    "siglip_vision_model": Family(_SIGLIP_DEFAULTS, fixed=dict(class_token=False, global_pool="map")),
    # NaFlex: each image's grid gets the table resized bilinearly (layers/naflex.py)
    "siglip2_vision_model": Family(
        _SIGLIP2_DEFAULTS, fixed=dict(class_token=False, global_pool="map", pos_resample="siglip2")
    ),
    # transformers computes DINOv3's rotary embedding for every input size, as dynamic_img_size does.
    "dinov3_vit": Family(
        _DINOV3_DEFAULTS,
        fixed=dict(pos_embed="none", rope="dinov3", rope_rotate_half=True, dynamic_img_size=True, global_pool="token"),
    ),
    # TIPSv2: DINOv2 with registers (one), positions added before the registers join, its table
    # resampled (bilinear) only at another input size; saved in the TIPS layout (keymaps.py)
    "tipsv2_vision_model": Family(_TIPSV2_DEFAULTS, fixed=dict(no_embed_class=True), mlp_from_ratio=True),
    # InternViT (InternVLVisionModel): LayerScale, no final norm with use_mean_pooling (transformers
    # returns the tokens; pooled by the class token, as OpenGVLab's InternVisionModel)
    "internvl_vision": Family(_INTERNVL_DEFAULTS, fixed=dict(global_pool="token")),
    # Sapiens2: DINOv3's rotary embedding for every input size; LayerScale on the attention branch only
    "sapiens2": Family(
        _SAPIENS2_DEFAULTS,
        fixed=dict(
            pos_embed="none",
            rope="dinov3",
            rope_rotate_half=True,
            dynamic_img_size=True,
            global_pool="token",
            norm_layer="rmsnorm",
            qkv_fused=False,
            layer_scale_mlp=False,
        ),
    ),
    # BEiT and data2vec's image model (transformers' copy of BEiT): _beit_fields
    "beit": Family(_BEIT_DEFAULTS),
    "data2vec-vision": Family(_BEIT_DEFAULTS),
    "radio": Family(_RADIO_DEFAULTS, fixed=dict(no_embed_class=True, final_norm=False), mlp_from_ratio=True),
    # Pixio: its n_cls_tokens class tokens (positions included) averaged, as its pooler_output
    "pixio": Family(
        _PIXIO_DEFAULTS, fixed=dict(global_pool="prefix_avg"), mlp_from_ratio=True, position_antialias=False
    ),
    # AIMv2: RMSNorm after the patch embedding (embed_norm) and in every block, the tokens averaged
    # (use_head: its attention-pooling head, _attention_fields)
    "aimv2_vision_model": Family(
        _AIMV2_DEFAULTS,
        fixed=dict(class_token=False, global_pool="avg", norm_layer="rmsnorm", embed_norm=True, mlp_layer="swiglu"),
    ),
    # SAM's image encoder (SamVisionModel): its neck ends in a LayerNorm, in the final norm's place
    "sam_vision_model": Family(
        _SAM_DEFAULTS, fixed=dict(class_token=False, global_pool="avg", final_norm=False), mlp_from_ratio=True
    ),
    # SAM 3's trunk (Sam3ViTModel): the backbone's tokens, averaged as SAM's; its table tiled to another grid
    "sam3_vit_model": Family(
        _SAM3_DEFAULTS,
        fixed=dict(
            class_token=False,
            global_pool="avg",
            final_norm=False,
            pre_norm=True,
            patch_bias=False,
            window_rope=True,
            pos_resample="tile",
        ),
    ),
}
# Whole text + image models: their vision tower is the vision_config of the family named here.
VISION_TOWERS = {
    "clip": "clip_vision_model",
    "metaclip_2": "metaclip_2_vision_model",
    "chinese_clip": "chinese_clip_vision_model",  # its text tower is a BERT: read for the image tower only
    "siglip": "siglip_vision_model",
    "siglip2": "siglip2_vision_model",
    "tipsv2": "tipsv2_vision_model",
    "aimv2": "aimv2_vision_model",  # its text tower is not read
    "sam": "sam_vision_model",  # its prompt encoder and mask decoder are no part of an image encoder
    # SAM 3: the trunk of its vision model (its FPN neck left out), of its detector, of its video model
    "sam3_vision_model": "sam3_vit_model",
    "sam3": "sam3_vit_model",
    "sam3_video": "sam3_vit_model",
}
# Where a whole model's config holds its tower's (default: "vision_config")
SUB_CONFIGS: dict[str, tuple[str, ...]] = {
    "sam3_vision_model": ("backbone_config",),
    "sam3": ("vision_config", "backbone_config"),
    "sam3_video": ("detector_config", "vision_config", "backbone_config"),
}
MODEL_TYPES = (*FAMILIES, *VISION_TOWERS)

# transformers' names for the config keys vitzoo reads, with their types: a value of another type
# is an error naming the key, never silently converted (int(3.5) would build a narrower model).
_KEY_TYPES: dict[str, Any] = {
    "hidden_size": int,
    "num_hidden_layers": int,
    "num_attention_heads": int,
    "intermediate_size": int,
    "mlp_ratio": float,
    "image_size": int | tuple[int, int],
    "patch_size": int | tuple[int, int],
    "num_channels": int,
    "qkv_bias": bool,
    "layer_norm_eps": float,
    "hidden_act": str,
    "layerscale_value": float,
    "use_swiglu_ffn": bool,
    "num_register_tokens": int,
    "vision_use_head": bool,
    "rope_theta": float,
    "query_bias": bool,
    "key_bias": bool,
    "value_bias": bool,
    "proj_bias": bool,
    "mlp_bias": bool,
    "use_gated_mlp": bool,
    "num_patches": int,
    "max_img_size": int,
    "num_cls_tokens": int,
    "num_registers": int,
    "n_cls_tokens": int,
    "norm_mean": list[float],
    "norm_std": list[float],
    "is_hybrid": bool,
    "backbone_config": dict[str, Any] | None,
    "apply_layernorm": bool,
    "attention_bias": bool,
    "use_qk_norm": bool,
    "norm_type": str,
    "use_absolute_position_embeddings": bool,
    "layer_scale_init_value": float,
    "use_mean_pooling": bool,
    "rms_norm_eps": float,
    "use_head": bool,
    "is_native": bool,
    "num_key_value_heads_per_layer": list[int] | None,
    "num_key_value_attention_heads": int,
    "num_first_full_attention_layers": int,
    "num_last_full_attention_layers": int,
    "pos_embed_shift": float | None,
    "pos_embed_jitter": float | None,
    "pos_embed_rescale": float | None,
    "mlp_dim": int | None,
    "use_abs_pos": bool,
    "use_rel_pos": bool,
    "window_size": int,
    "global_attn_indexes": list[int],
    "output_channels": int,
    "use_relative_position_bias": bool,
    "use_shared_relative_position_bias": bool,
    "pretrain_image_size": int | tuple[int, int],
    "rope_parameters": dict[str, Any] | None,
}
# Settings no vitzoo layer computes: the one value each family's models must have, and why.
_REFUSED: dict[str, tuple[Any, str]] = {
    "is_hybrid": (False, "DPT-Hybrid's embeddings are a BiT ResNet"),
    "backbone_config": (None, "a DPT over another backbone model (read that backbone's own checkpoint)"),
    "apply_layernorm": (True, "vitzoo's TIPSv2 ends with its LayerNorm"),
    "is_native": (False, "AIMv2 native's 2D sinusoidal positions are not vitzoo's table"),
    "use_shared_relative_position_bias": (
        False,
        "BEiT's pre-training table shared by every block (vitzoo's is per block)",
    ),
}


def family_of(cfg: dict[str, Any]) -> str | None:
    """The family (a FAMILIES key) of a transformers config.json, or None if it is none of them."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):
        return None
    return VISION_TOWERS.get(model_type, model_type if model_type in FAMILIES else None)


def transformers_config(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """The ViTConfig fields a transformers config.json states (see the module docstring)."""
    where = repr(str(path))
    name = family_of(cfg)
    if name is None:
        raise WeightsFileError(f"{where}: model_type={cfg.get('model_type')!r} is not one vitzoo reads")
    if name != cfg["model_type"]:  # a text + image model: its vision tower
        where, cfg = tower_config(cfg, where)
    family = FAMILIES[name]
    values = {**family.defaults, **{k: v for k, v in cfg.items() if k in family.defaults and v is not None}}
    try:
        check_types(values, _KEY_TYPES)
    except TypeError as e:
        raise WeightsFileError(f"{where}: invalid transformers config ({e})") from e
    hidden = values["hidden_size"]
    if hidden <= 0:
        raise WeightsFileError(f"{where}: hidden_size={hidden!r} is invalid; expected an int >= 1")
    act = values["hidden_act"]
    if act not in ACTIVATIONS:
        raise WeightsFileError(
            f"{where}: hidden_act={act!r} is not supported; expected one of {', '.join(map(repr, ACTIVATIONS))}"
        )
    for key, (expected, why) in _REFUSED.items():
        if key in values and values[key] != expected:
            raise WeightsFileError(f"{where}: {key}={values[key]!r} is not supported; expected {expected!r} ({why})")
    if values.get("vision_use_head", True) is not True:
        raise WeightsFileError(
            f"{where}: vision_use_head={values['vision_use_head']!r} is not supported; expected true "
            "(vitzoo pools SigLIP with its attention-pooling head)"
        )
    mlp_ratio = values["mlp_ratio"] if family.mlp_from_ratio else values["intermediate_size"] / hidden
    fields: dict[str, Any] = dict(
        embed_dim=hidden,
        depth=values["num_hidden_layers"],
        num_heads=values["num_attention_heads"],
        mlp_ratio=mlp_ratio,
        img_size=_size(values["image_size"]) if "num_patches" not in values else _naflex_size(values, where),
        patch_size=_size(values["patch_size"]),
        in_chans=values["num_channels"],
        norm_eps=float(values["rms_norm_eps" if "rms_norm_eps" in values else "layer_norm_eps"]),
        act_layer=ACTIVATIONS[act],
        **family.fixed,
    )
    fields.update(_attention_fields(name, values, where))
    if name == "radio":
        _radio_fields(values, fields, where)
    if name == "sam_vision_model":
        fields.update(_sam_fields(values))
    if name == "sam3_vit_model":
        fields.update(_sam3_fields(values, where))
    if values.get("use_swiglu_ffn"):  # DINOv2-g: SiLU-gated, its own width rule (swiglu.py)
        hidden_units = dinov2_swiglu_hidden_dim(hidden, mlp_ratio)
        fields.update(mlp_layer="swiglu_packed", act_layer="silu", mlp_ratio=packed_mlp_ratio(hidden, hidden_units))
    if any(s % p for s, p in zip(_pair(fields["img_size"]), _pair(fields["patch_size"]))):
        fields["drop_remainder"] = True  # the patch conv ignores the pixels past the last whole patch
    # RADIO: the tensors decide; C-RADIOv4-H's file has no LayerScale, which RadioModel fills with 1.0 (the identity)
    if "layerscale_value" in values and name != "radio":
        fields["init_values"] = float(values["layerscale_value"])
    if "num_register_tokens" in values:
        fields["reg_tokens"] = values["num_register_tokens"]
    if "n_cls_tokens" in values:  # Pixio: the first class token is vitzoo's, the others its registers
        if values["n_cls_tokens"] < 1:
            raise WeightsFileError(f"{where}: n_cls_tokens={values['n_cls_tokens']!r} is invalid; expected an int >= 1")
        fields["reg_tokens"] = values["n_cls_tokens"] - 1
    return fields


def _attention_fields(name: str, values: dict[str, Any], where: str) -> dict[str, Any]:
    """The attention biases (and the options that go with them; AIMv2's attention pool) of a family's config."""
    if name == "dinov3_vit":
        return _dinov3_fields(values, where)
    if name == "aimv2_vision_model":  # out_proj biased as q/k/v; the MLP by mlp_bias
        if values["qkv_bias"] is not values["mlp_bias"]:
            raise WeightsFileError(
                f"{where}: qkv_bias={values['qkv_bias']!r} with mlp_bias={values['mlp_bias']!r} is not supported; "
                "expected both true or both false (vitzoo's proj_bias covers the attention output and the MLP)"
            )
        pool = "aimv2" if values["use_head"] else "avg"  # its head's k/v biased as q/k/v
        return {"qkv_bias": values["qkv_bias"], "proj_bias": values["mlp_bias"], "global_pool": pool}
    if name == "sapiens2":
        return _sapiens2_fields(values, where)
    if name in ("beit", "data2vec-vision"):
        return _beit_fields(values)
    if name == "internvl_vision":  # q/k/v biased or not together; LayerScale by its own key
        if not values["use_absolute_position_embeddings"]:
            raise WeightsFileError(
                f"{where}: use_absolute_position_embeddings=False is not supported; expected True "
                "(vitzoo's InternViT has a learned position table)"
            )
        return dict(
            qkv_bias=values["attention_bias"],
            init_values=float(values["layer_scale_init_value"]),
            final_norm=not values["use_mean_pooling"],
            **_internvit_norms(values, where),
        )
    return {"qkv_bias": values["qkv_bias"]}


# InternViT's RMSNorm (InternViT-6B) normalises in float32 and casts back: vitzoo's RMSNorm, at fp32
def _internvit_norms(values: dict[str, Any], where: str) -> dict[str, Any]:
    """InternViT's norm kind (norm_type) and its qk-norm (use_qk_norm: an RMSNorm of q and of k
    over all heads at once, ViTConfig.qk_norm="full"), which vitzoo's one norm_layer / norm_eps
    must state: only with RMSNorm blocks at the q/k norms' eps (InternViT-6B's)."""
    norm = values["norm_type"]
    if norm not in ("layer_norm", "rms_norm"):
        raise WeightsFileError(f"{where}: norm_type={norm!r} is not supported; expected 'layer_norm' or 'rms_norm'")
    fields: dict[str, Any] = {"norm_layer": "rmsnorm"} if norm == "rms_norm" else {}
    if values["use_qk_norm"]:
        qk_eps = NORM_EPS["internvit_qk"]  # its q/k norms: RMSNorms over all heads, at their class's default
        if norm != "rms_norm" or values["layer_norm_eps"] != qk_eps:
            raise WeightsFileError(
                f"{where}: use_qk_norm=True with norm_type={norm!r} and layer_norm_eps={values['layer_norm_eps']!r} "
                f"is not supported: its q/k norms are RMSNorms at eps {qk_eps:g}, and vitzoo has one "
                f"norm kind and eps; expected norm_type='rms_norm' and layer_norm_eps={qk_eps:g} "
                "(InternViT-6B's)"
            )
        fields["qk_norm"] = "full"
    return fields


def _beit_fields(values: dict[str, Any]) -> dict[str, Any]:
    """BEiT's attention (q and v biased, k not), positions, LayerScale and pooling. Whether the
    mean-pooled feature is normalised (the pooler's LayerNorm: fc_norm) the tensors say: a model saved
    without its pooler (Data2VecVisionModel's default) has no norm at all."""
    scale = float(values["layer_scale_init_value"])
    return dict(
        qkv_bias=True,
        k_bias=False,
        pos_embed="learned" if values["use_absolute_position_embeddings"] else "none",
        rel_pos_table=values["use_relative_position_bias"],
        init_values=scale if scale > 0 else None,
        global_pool="avg" if values["use_mean_pooling"] else "token",
    )


def _dinov3_fields(values: dict[str, Any], where: str) -> dict[str, Any]:
    """DINOv3ViTConfig's attention biases, rotary base and MLP, as ViTConfig fields."""
    for key in ("proj_bias", "mlp_bias"):
        if values[key] is not True:
            raise WeightsFileError(
                f"{where}: {key}={values[key]!r} is not supported; expected true (vitzoo's layers have it)"
            )
    if values["query_bias"] is not values["value_bias"]:
        raise WeightsFileError(
            f"{where}: query_bias={values['query_bias']!r} with value_bias={values['value_bias']!r} is not supported; "
            "expected both true or both false"
        )
    bias = values["query_bias"]
    if values["key_bias"] and not bias:
        raise WeightsFileError(
            f"{where}: key_bias=true without query and value biases is not supported; expected false"
        )
    fields: dict[str, Any] = dict(qkv_bias=bias, k_bias=values["key_bias"] or not bias)
    fields["rope_temperature"] = float(values["rope_theta"])
    if values["use_gated_mlp"]:  # act(gate_proj(x)) * up_proj(x): timm's SwiGLU (fc1_g, fc1_x)
        fields["mlp_layer"] = "swiglu"
    return fields


def _sapiens2_fields(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Sapiens2Config's attention as ViTConfig fields: DINOv3's biases and MLP (separate q/k/v
    projections, so a bias on k alone is stated as such), the key/value heads of each layer,
    qk-norm per head, and the training-only jitter of its rotary coordinates."""
    fields = _dinov3_fields(values, where)
    fields["k_bias"] = values["key_bias"]
    if values["use_gated_mlp"]:  # saved packed (w12: gate, then input): fc1 twice the hidden width
        fields.update(mlp_layer="swiglu_packed", mlp_ratio=2 * values["intermediate_size"] / values["hidden_size"])
    depth, heads = values["num_hidden_layers"], values["num_attention_heads"]
    kv = values["num_key_value_heads_per_layer"]
    if kv is None:  # transformers' rule: full attention in the first and last layers
        first, last = values["num_first_full_attention_layers"], values["num_last_full_attention_layers"]
        kv = [
            heads if i < first or i >= depth - last else values["num_key_value_attention_heads"] for i in range(depth)
        ]
    if len(kv) != depth:
        raise WeightsFileError(
            f"{where}: num_key_value_heads_per_layer has {len(kv)} entries for num_hidden_layers={depth}; "
            "expected one per layer"
        )
    if any(h != heads for h in kv):
        fields["num_kv_heads"] = kv[0] if len(set(kv)) == 1 else tuple(kv)
    if values["use_qk_norm"]:
        fields["qk_norm"] = "head"
    for key, field_name in (
        ("pos_embed_shift", "rope_shift_coords"),
        ("pos_embed_jitter", "rope_jitter_coords"),
        ("pos_embed_rescale", "rope_rescale_coords"),
    ):
        if values[key] is not None:
            fields[field_name] = float(values[key])
    return fields


def _sam_fields(values: dict[str, Any]) -> dict[str, Any]:
    """SamVisionConfig's windows, relative positions, neck and MLP width (mlp_dim, else hidden * mlp_ratio)."""
    fields: dict[str, Any] = dict(
        window_size=values["window_size"],
        global_attn_indexes=tuple(values["global_attn_indexes"]) if values["window_size"] else (),
        use_rel_pos=values["use_rel_pos"],
        neck_chans=values["output_channels"],
    )
    if values["mlp_dim"] is not None:
        fields["mlp_ratio"] = values["mlp_dim"] / values["hidden_size"]
    if not values["use_abs_pos"]:
        fields["pos_embed"] = "none"
    return fields


def tower_config(cfg: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """A whole model's config.json: its image tower's config (SUB_CONFIGS, else vision_config) and
    where it is, for messages."""
    for key in SUB_CONFIGS.get(cfg["model_type"], ("vision_config",)):
        sub = cfg.get(key) or {}
        if not isinstance(sub, dict):
            raise WeightsFileError(f"{where}: {key}={sub!r} is invalid; expected a JSON object")
        where, cfg = f"{where} ({key})", sub
    return where, cfg


def _sam3_fields(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Sam3ViTConfig's windows and rotary positions; img_size the grid of its position table
    (pretrain_image_size), the model built at image_size (`sam3_model_size`) and the table tiled."""
    rope = values["rope_parameters"] or {}
    kind = rope.get("rope_type", "axial")
    if kind != "axial":
        raise WeightsFileError(
            f"{where}: rope_parameters.rope_type={kind!r} is not supported; expected 'axial' (Sam3ViTRotaryEmbedding's)"
        )
    for key in ("image_size", "pretrain_image_size"):  # Sam3ViTLayer / Sam3ViTEmbeddings lay out square grids
        side = _pair(_size(values[key]))
        if side[0] != side[1]:
            raise WeightsFileError(
                f"{where}: {key}={values[key]!r} is not supported; expected a square size (transformers' SAM 3 "
                "computes its global blocks' positions and tiles its table for a square grid only)"
            )
    theta = rope.get("rope_theta", values["rope_theta"])
    if isinstance(theta, bool) or not isinstance(theta, int | float) or not theta > 0:
        raise WeightsFileError(f"{where}: rope_parameters.rope_theta={theta!r} is invalid; expected a positive number")
    return dict(
        img_size=_size(values["pretrain_image_size"]),
        window_size=values["window_size"],
        global_attn_indexes=tuple(values["global_attn_indexes"]),
        rope_temperature=float(theta),
    )


def sam3_model_size(cfg: dict[str, Any], where: str) -> tuple[int, int]:
    """The input size a SAM 3 config builds its trunk for (image_size; Sam3ViTConfig's default 1008)."""
    if cfg.get("model_type") != "sam3_vit_model":
        where, cfg = tower_config(cfg, where)
    size = cfg.get("image_size", _SAM3_DEFAULTS["image_size"])
    check_types({"image_size": size}, _KEY_TYPES)
    return _pair(_size(size))


def _naflex_size(values: dict[str, Any], where: str) -> int:
    """SigLIP 2 NaFlex: the square image its position table covers (num_patches = side x side)."""
    side, patch = math.isqrt(values["num_patches"]), values["patch_size"]
    if values["num_patches"] <= 0 or side * side != values["num_patches"] or not isinstance(patch, int):
        raise WeightsFileError(
            f"{where}: num_patches={values['num_patches']!r} with patch_size={patch!r} is not supported; "
            "expected a square number of patches and an int patch size"
        )
    return side * patch


def _radio_fields(values: dict[str, Any], fields: dict[str, Any], where: str) -> None:
    """RADIO's summary tokens and its position table's grid: the table is for max_img_size."""
    if values["use_swiglu_ffn"]:
        raise WeightsFileError(f"{where}: use_swiglu_ffn=True is not supported for RADIO; expected false")
    tokens = values["num_cls_tokens"] + values["num_registers"]
    if values["num_cls_tokens"] < 1 or values["num_registers"] < 0:
        raise WeightsFileError(f"{where}: num_cls_tokens={values['num_cls_tokens']!r} is invalid; expected >= 1")
    fields.update(reg_tokens=tokens - 1, img_size=values["max_img_size"])


def radio_input(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """The PretrainedCfg fields a RADIO config states: RadioModel normalises its input itself by
    norm_mean / norm_std, which vitzoo's preprocessing does instead, at image_size."""
    values = {**FAMILIES["radio"].defaults, **{k: v for k, v in cfg.items() if v is not None}}
    size = values["image_size"]
    check_types({"image_size": size, "norm_mean": values["norm_mean"], "norm_std": values["norm_std"]}, _KEY_TYPES)
    side = size if isinstance(size, int) else size[0]
    return checked_pretrained(
        {"input_size": [3, side, side], "mean": values["norm_mean"], "std": values["norm_std"], "crop_pct": 1.0},
        where,
    )


def refuse_remote_radio(cfg: dict[str, Any], where: str) -> None:
    """NVIDIA's own RADIO config (RADIOModel through trust_remote_code: the ViT named by args.model,
    cpe_max_size, the adaptors), as nvidia/C-RADIOv4-SO400M publishes it, is refused by name: no
    reader of vitzoo's turns it into widths, summary tokens and a position grid."""
    args, architectures = cfg.get("args"), cfg.get("architectures") or []
    if isinstance(args, dict) and "model" in args and "RADIOModel" in architectures:
        raise WeightsFileError(
            f"{where}: NVIDIA's remote-code RADIO config (RADIOModel, args.model={args['model']!r}) is not "
            "supported; expected transformers' RadioModel config (model_type 'radio': hidden_size, num_cls_tokens, "
            "num_registers, max_img_size), or timm's copy of the release (vitzoo list --family radio)"
        )


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else value


def _size(value: int | list[int] | tuple[int, int]) -> int | tuple[int, int]:
    return tuple(value) if isinstance(value, list) else value  # type: ignore[return-value]


def transformers_labels(cfg: dict[str, Any], num_classes: int, where: str) -> dict[str, Any]:
    """label_names from a config's id2label: one string per class of the head, keyed "0".."n-1".
    transformers' placeholder names (LABEL_0, LABEL_1, ...), which it writes for any model, and the
    id2label of a model without a head are ignored; other names that do not fit the head are an error."""
    id2label = cfg.get("id2label") or {}
    if not isinstance(id2label, dict):
        raise WeightsFileError(f"{where!r}: id2label={id2label!r} is invalid; expected a JSON object")
    for key, name in id2label.items():
        if not isinstance(name, str):
            raise WeightsFileError(
                f"{where!r}: id2label[{key!r}]={name!r} is invalid; expected a string (a class name)"
            )
    if not num_classes or all(re.fullmatch(r"LABEL_\d+", n) for n in id2label.values()):
        return {}
    names = tuple(id2label.get(str(i)) for i in range(num_classes))
    if len(id2label) != num_classes or None in names:
        raise WeightsFileError(
            f"{where!r}: id2label names {len(id2label)} classes for a head of {num_classes}; "
            f'expected one name per class, keyed "0" to "{num_classes - 1}"'
        )
    return {"label_names": names}


# ----------------------------------------------------------------------------- preprocessing
# transformers' image processors store PIL's resampling filter codes (PILImageResampling).
PIL_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


@dataclass(frozen=True)
class Processor:
    """An image processor class: its defaults for keys a preprocessor_config.json omits, and
    whether an int `size` is the short side (CLIP, BiT: aspect ratio kept) or a square (ViT, DeiT)."""

    defaults: dict[str, Any]
    int_size_is_short_side: bool = False


_VIT_PROCESSOR = dict(
    do_resize=True,
    size={"height": 224, "width": 224},
    resample=2,
    do_center_crop=False,
    do_rescale=True,
    rescale_factor=1 / 255,
    do_normalize=True,
    image_mean=list(INCEPTION_MEAN),
    image_std=list(INCEPTION_STD),
)
_CLIP_PROCESSOR = dict(
    _VIT_PROCESSOR,
    size={"shortest_edge": 224},
    resample=3,
    do_center_crop=True,
    crop_size={"height": 224, "width": 224},
    image_mean=list(CLIP_MEAN),
    image_std=list(CLIP_STD),
)
# By the class name a preprocessor_config.json states (image_processor_type, or the older
# feature_extractor_type), its prefix before "ImageProcessor" / "FeatureExtractor".
PROCESSORS: dict[str, Processor] = {
    "ViT": Processor(_VIT_PROCESSOR),
    "DeiT": Processor(
        dict(
            _VIT_PROCESSOR,
            size={"height": 256, "width": 256},
            resample=3,
            do_center_crop=True,
            crop_size={"height": 224, "width": 224},
        )
    ),
    "CLIP": Processor(_CLIP_PROCESSOR, int_size_is_short_side=True),
    "Bit": Processor(_CLIP_PROCESSOR, int_size_is_short_side=True),  # DINOv2's processor
    "Siglip": Processor(dict(_VIT_PROCESSOR, resample=3)),
    # NaFlex resizes each image to the most patches that fit max_num_patches at its aspect ratio;
    # vitzoo's tower is built for the square its position table covers, which the resize squashes to.
    # max_num_patches: the patch budget of its patch-sequence batches (PretrainedCfg.max_patches);
    # without a size, an image tensor is the largest square of patches within it.
    "Siglip2": Processor(dict(_VIT_PROCESSOR, resample=2, max_num_patches=256, patch_size=16)),
    "Sam3": Processor(dict(_VIT_PROCESSOR, size={"height": 1008, "width": 1008})),
    "DINOv3ViT": Processor(dict(_VIT_PROCESSOR, image_mean=list(IMAGENET_MEAN), image_std=list(IMAGENET_STD))),
    "Sapiens2": Processor(
        dict(
            _VIT_PROCESSOR,
            size={"height": 1024, "width": 768},
            image_mean=list(IMAGENET_MEAN),
            image_std=list(IMAGENET_STD),
        )
    ),
}


def _processor(proc: dict[str, Any]) -> Processor:
    kind = str(proc.get("image_processor_type") or proc.get("feature_extractor_type") or "")
    for suffix in ("ImageProcessorFast", "ImageProcessor", "FeatureExtractor"):
        kind = kind.removesuffix(suffix)
    return PROCESSORS.get(kind, PROCESSORS["ViT"])  # unnamed: ViTImageProcessor, as before


def transformers_preprocessing(proc: dict[str, Any], where: str) -> dict[str, Any]:
    """The PretrainedCfg fields a transformers preprocessor_config.json states, in timm's terms:
    an exact resize to (H, W) without a crop (ViT, SigLIP) is crop_mode "squash" with crop_pct 1.0;
    DeiTImageProcessor's 256x256 resize + centre crop 224 is "squash" with crop_pct 224/256; a
    short-side resize to S with a centre crop C (CLIP, DINOv2's BiT processor) is "center" with
    crop_pct C/S."""
    processor = _processor(proc)
    values = dict(processor.defaults)
    values.update({k: v for k, v in proc.items() if v is not None})

    def refuse(key: str, expected: str) -> WeightsFileError:
        return WeightsFileError(f"{where!r}: {key}={values.get(key)!r} is not supported; expected {expected}")

    factor = values["rescale_factor"]
    if values["do_rescale"] is not True:
        raise refuse("do_rescale", "true (vitzoo's evaluation transform scales pixel values to [0, 1])")
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not math.isclose(factor * 255, 1.0):
        raise refuse("rescale_factor", "1/255 (vitzoo's evaluation transform scales pixel values to [0, 1])")
    if values["do_resize"] is not True:
        raise refuse("do_resize", "true (a ViT takes images of a fixed size)")
    resample = values["resample"]
    if isinstance(resample, bool) or resample not in PIL_FILTERS:
        raise refuse("resample", "a PIL filter code: " + ", ".join(f"{k} ({v})" for k, v in PIL_FILTERS.items()))
    out: dict[str, Any] = {"interpolation": PIL_FILTERS[resample]}
    if "max_num_patches" in processor.defaults:  # NaFlex: a patch budget per image
        budget, patch = values["max_num_patches"], values.get("patch_size", 16)
        for key, value in (("max_num_patches", budget), ("patch_size", patch)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise refuse(key, "a positive int")
        out["max_patches"] = budget
        if "size" not in proc:  # an image tensor: the largest square grid within the budget
            side = math.isqrt(budget) * patch
            values["size"] = {"height": side, "width": side}
    if values["do_normalize"] is True:
        out["mean"], out["std"] = values["image_mean"], values["image_std"]
        for key in ("mean", "std"):
            if isinstance(out[key], int | float) and not isinstance(out[key], bool):
                out[key] = [out[key]] * 3  # transformers accepts one number for every channel
    else:
        out["mean"], out["std"] = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    size = _processor_size(values["size"], "size", where, short_side=processor.int_size_is_short_side)
    if values["do_center_crop"] is True:
        crop = _processor_size(values["crop_size"], "crop_size", where, short_side=False)
        if isinstance(crop, int):
            raise refuse("crop_size", 'a size: an int or {"height": H, "width": W}')
        if isinstance(size, int):  # the short side: keep the aspect ratio, then crop the centre
            out.update(crop_mode="center", crop_pct=min(crop) / size)
        else:
            pct = crop[0] / size[0]
            if not math.isclose(pct, crop[1] / size[1]):
                raise refuse("crop_size", f"the same fraction of both sides of size={values['size']!r}")
            out.update(crop_mode="squash", crop_pct=pct)
        out["input_size"] = [3, *crop]
    else:
        if isinstance(size, int):
            raise refuse("size", '{"height": H, "width": W} when there is no centre crop (a fixed input size)')
        out.update(crop_mode="squash", crop_pct=1.0, input_size=[3, *size])
    return checked_pretrained(out, where)


def _processor_size(value: Any, key: str, where: str, *, short_side: bool) -> tuple[int, int] | int:
    """(height, width) of a processor size, or the side S of {"shortest_edge": S} (and of a bare
    int, for processors that read it so)."""

    def positive(v: Any) -> TypeGuard[int]:
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    if positive(value):
        return value if short_side else (value, value)
    if isinstance(value, dict):
        h, w, short = value.get("height"), value.get("width"), value.get("shortest_edge")
        if positive(h) and positive(w) and short is None:
            return h, w
        if positive(short) and h is None and w is None:
            return short
    raise WeightsFileError(
        f'{where!r}: {key}={value!r} is not supported; expected an int, {{"height": H, "width": W}} '
        'or {"shortest_edge": S}'
    )
