"""The ViTConfig of a generated timm architecture (vitzoo/zoo/timm_releases.py's rows), for the
generated table and for the curated models built on one of timm's architectures."""

from __future__ import annotations

from typing import Any

from ..model import ViTConfig
from .timm_releases import ARCHITECTURES, FAMILY_BASES


def as_tuples(value: Any) -> Any:
    """JSON-like lists (the generated rows) as tuples, nested ones too."""
    return tuple(as_tuples(v) for v in value) if isinstance(value, list | tuple) else value


def arch_config(arch: str) -> ViTConfig:
    """The ViTConfig of a generated timm architecture (its default release's classes and size)."""
    _, fam, fields = ARCHITECTURES[arch]
    return ViTConfig(**{k: as_tuples(v) for k, v in {**FAMILY_BASES[fam], **fields}.items()})
