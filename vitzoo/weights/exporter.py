"""Writing a vitzoo model for another library: `export(model, "timm", path)` gives a safetensors
file that timm's own loader reads with identical logits (`"vitzoo"` is `save_pretrained`, see
vitzoo/layout.py). Reading other layouts is vitzoo/weights/keymaps.py's job.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from ..atomic import write_safetensors
from ..layers.lora import merged_state_dict
from ..layout import save_pretrained
from .errors import WeightsMismatchError
from .files import StateDict
from .keymaps import to_timm

EXPORT_FORMATS = ("timm", "vitzoo")


def is_eva(config: object) -> bool:
    """Whether timm builds this architecture as its Eva (rotary embedding, EVA's attention layouts,
    no position table) rather than its VisionTransformer: the names of LayerScale differ. timm's
    relpos ViT (a relative position bias MLP, no table) keeps the VisionTransformer's names."""
    if getattr(config, "rel_pos_mlp", 0):
        return False
    return bool(
        getattr(config, "rope", "")
        or not getattr(config, "qkv_fused", True)
        or not getattr(config, "k_bias", True)
        or getattr(config, "pos_embed", "learned") == "none"
    )


def export(model: nn.Module, format: str, path: str | os.PathLike[str]) -> Path:
    """Write `model` for another library. "timm": a safetensors file (in the names of timm's Eva
    for RoPE and EVA models, of its VisionTransformer otherwise) that
    `timm.create_model(<timm name>, pretrained=True, pretrained_cfg_overlay=dict(file=path, custom_load=False))`
    loads with identical logits (custom_load=False: before timm 1.0.31 a file overlay keeps the Google
    .npz loader of the AugReg ViTs); "vitzoo": `save_pretrained` into the directory `path`. LoRA
    adapters are merged into their weights in both, so the file holds a plain model."""
    if format == "vitzoo":
        return save_pretrained(model, path)
    if format != "timm":
        raise ValueError(f"unknown export format {format!r}; expected one of {', '.join(EXPORT_FORMATS)}")
    state = timm_state_dict(model)
    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(
            f"export to timm writes a safetensors file: expected a path ending in .safetensors, got {str(path)!r}"
        )
    return write_safetensors(path, state, metadata={"format": "pt"})


def timm_state_dict(model: nn.Module) -> StateDict:
    """`model`'s weights in timm's names (its Eva's for RoPE and EVA models), LoRA merged; refused
    for what timm's models cannot hold."""
    config = getattr(model, "config", None)
    if config is not None:
        problems = []
        if getattr(config, "pos_embed", "learned") == "sincos":
            problems.append("fixed sincos position embedding (timm's ViT learns it)")
        if getattr(config, "pos_embed", "learned") == "factorized":
            problems.append("a factorized position table (timm's NaFlexVit holds it, not its ViT or Eva)")
        if not getattr(config, "final_norm", True):
            problems.append("no final LayerNorm")
        if getattr(config, "global_pool", "") == "aimv2":
            problems.append("AIMv2's attention-pooling head (timm's VisionTransformer has none)")
        if getattr(config, "global_pool", "token") == "prefix_avg":
            problems.append("the mean of its prefix tokens as its pool (Pixio's; no pool of timm's computes it)")
        if problems:
            raise WeightsMismatchError(f"cannot export to timm: this model has {' and '.join(problems)}")
    return to_timm(
        merged_state_dict(model),
        what=f"{type(model).__name__} {getattr(model, 'architecture', '') or ''}".strip(),
        eva=is_eva(config),
    )
