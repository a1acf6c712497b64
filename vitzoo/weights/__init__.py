"""Pretrained weights: sources, converters between checkpoint layouts, adaptation, saving."""

from .pretrained_cfg import PretrainedCfg

__all__ = ["PretrainedCfg"]
