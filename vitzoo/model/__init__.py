"""The Vision Transformer and its config: one model class over every family, its components as
parts (part.py), each owning its config fields' checks, parameter count, FLOPs, refusals and build.

    fields.py               the fields, what follows from them, the allowed values of fixed choices
    config.py               ViTConfig: the fields checked, the core checks, the loops over the parts
    stem.py                 the patch embedding (conv stem, hybrid CNN stem, AIMv2's norm)
    positions.py            prefix tokens, absolute positions (learned, sincos, factorized), norm_pre
    rope.py                 2D rotary position embedding
    blocks.py               the encoder blocks: attention, MLP and their options
    sam.py                  SAM's windows, decomposed relative positions and neck
    relpos.py               BEiT's relative position table, the relpos ViT's MLP
    pools.py                "token", "avg", "prefix_avg", "map", "aimv2" pooling
    coca.py                 CoCa's attentional pooler
    head.py                 the final norm, the representation layer, the classifier(s)
    vision_transformer.py   VisionTransformer: forward, the backbone API, patch sequences
    intermediates.py        timm's block selection and forms of forward_intermediates' results
    timm_cfg.py             timm's architecture keys of the pretrained cfg
"""

from __future__ import annotations

from .coca import COCA_POOL_OFF, COCA_QUERIES
from .config import PARTS, ViTConfig
from .fields import ATTN_LAYERS, GLOBAL_POOLS, POS_EMBEDS, ViTFields
from .intermediates import Intermediates, feature_take_indices
from .part import Part, Refusal
from .positions import pos_embed_for_grid, pos_embed_for_image
from .timm_cfg import TIMM_ARCHITECTURE_KEYS, fit_pretrained_cfg, timm_architecture_cfg, timm_default_cfg
from .vision_transformer import VisionTransformer

# Its public home: pickles, reprs and code written for timm (`type(model).__module__`) name it here.
VisionTransformer.__module__ = __name__

__all__ = [
    "ATTN_LAYERS",
    "COCA_POOL_OFF",
    "COCA_QUERIES",
    "GLOBAL_POOLS",
    "PARTS",
    "POS_EMBEDS",
    "TIMM_ARCHITECTURE_KEYS",
    "Intermediates",
    "Part",
    "Refusal",
    "ViTConfig",
    "ViTFields",
    "VisionTransformer",
    "feature_take_indices",
    "fit_pretrained_cfg",
    "pos_embed_for_grid",
    "pos_embed_for_image",
    "timm_architecture_cfg",
    "timm_default_cfg",
]
