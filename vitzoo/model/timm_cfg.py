"""timm's pretrained cfg of a model: the keys that follow from its architecture rather than its
weights, and a name's preprocessing fitted to a model without weights."""

from __future__ import annotations

from typing import Any

from ..pretrained_cfg import PretrainedCfg
from .config import ViTConfig
from .stem import first_conv

# The keys of timm's pretrained cfg that follow from the architecture rather than the weights; one
# home, read by `VisionTransformer.default_cfg`, the registry (`get_pretrained_cfg_value`) and push.
TIMM_ARCHITECTURE_KEYS = ("fixed_input_size", "first_conv", "classifier")


def timm_architecture_cfg(config: ViTConfig) -> dict[str, Any]:
    """TIMM_ARCHITECTURE_KEYS of a model of `config`: whether only its own input size is taken (not
    `dynamic_img_size`), its first convolution and its classifier(s), as timm names them."""
    return {
        "fixed_input_size": not config.dynamic_img_size,
        "first_conv": first_conv(config),
        "classifier": ("head", "head_dist") if config.distilled else "head",
    }


def timm_default_cfg(pcfg: PretrainedCfg, config: ViTConfig) -> dict[str, Any]:
    """timm's whole pretrained cfg as one dict: the fields of `pcfg` and the architecture's keys."""
    return {**pcfg.to_dict(), **timm_architecture_cfg(config)}


def fit_pretrained_cfg(cfg: PretrainedCfg, config: ViTConfig) -> PretrainedCfg:
    """A name's preprocessing without weights, fitted to the model `config` builds: its input size and
    class count (its label names only while the class count is theirs)."""
    labels = cfg.label_names if config.num_classes == cfg.num_classes else None
    return cfg.replace(input_size=config.input_size, num_classes=config.num_classes, label_names=labels)
