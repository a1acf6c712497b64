"""The norm eps of each family whose reference library fixes one: one table, read wherever vitzoo
needs a family's eps that no file states.

Readers: the key maps (keymaps.py: the eps a weights file without its config.json implies), the
config classes' defaults of transformers' model types (transformers_files.py: a config.json that
leaves the eps out), the text towers' (text/transformers_config.py) and the registered text towers
built without weights (text/load.py). `tests/weights/test_norm_eps.py` checks every row against its
library's own default, so a library that changes one shows up there rather than as numbers that
drift apart by a few ulps.

Keys are families, not model types: each row names the config classes whose default it is.
"""

from __future__ import annotations

NORM_EPS: dict[str, float] = {
    # transformers' ViT, DeiT, ViTMAE, IJepa, DPT, BEiT, data2vec-vision: layer_norm_eps (timm's and
    # Google's ViT use ViTConfig.norm_eps's default)
    "vit": 1e-12,
    "vit_msn": 1e-6,  # ViTMSNConfig: unlike the other ViT copies
    "dinov2": 1e-6,  # Dinov2Config, Dinov2WithRegistersConfig
    "tipsv2": 1e-6,  # Tipsv2VisionConfig (and Google's TIPS files, in DINOv2's names)
    "clip": 1e-5,  # CLIPVisionConfig, MetaClip2VisionConfig, ChineseCLIPVisionConfig
    "siglip": 1e-6,  # SiglipVisionConfig, Siglip2VisionConfig
    "dinov3": 1e-5,  # DINOv3ViTConfig
    "aimv2": 1e-5,  # Aimv2VisionConfig.rms_norm_eps
    "sapiens2": 1e-6,  # Sapiens2Config.rms_norm_eps
    "sam": 1e-6,  # SamVisionConfig: the blocks' norms (the neck's: layers/sam.py NECK_EPS)
    "sam3": 1e-6,  # Sam3ViTConfig
    "internvit": 1e-6,  # InternVLVisionConfig
    # InternViT-6B's q/k norms: InternVLVisionRMSNorm's own default, which no config key sets
    "internvit_qk": 1e-6,
    "radio": 1e-6,  # RadioConfig
    "pixio": 1e-6,  # PixioConfig
    # the text towers of transformers' CLIP and SigLIP models: CLIPTextConfig, SiglipTextConfig (and
    # TextConfig's default: CLIP's text tower)
    "clip_text": 1e-5,
    "siglip_text": 1e-6,
    # open_clip's norms where its config's norm_kwargs state no eps: torch's LayerNorm default
    "open_clip": 1e-5,
}
