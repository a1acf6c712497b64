"""`PretrainedCfg`: what a set of weights expects of its input and where it comes from.

It travels with the weights: the preprocessing (input size, mean/std, interpolation, crop_pct)
and the label names are properties of the checkpoint, not of the architecture.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INCEPTION_MEAN = (0.5, 0.5, 0.5)  # the original ViT and AugReg releases normalise to [-1, 1]
INCEPTION_STD = (0.5, 0.5, 0.5)
MNIST_MEAN = (0.1307,)
MNIST_STD = (0.3081,)


@dataclass(frozen=True)
class PretrainedCfg:
    """Plain data: `dataclasses.asdict(cfg)` / `cfg.to_dict()` gives JSON-ready values."""

    input_size: tuple[int, int, int] = (3, 224, 224)  # (C, H, W)
    mean: tuple[float, ...] = INCEPTION_MEAN
    std: tuple[float, ...] = INCEPTION_STD
    interpolation: str = "bicubic"
    crop_pct: float = 0.9
    num_classes: int = 1000
    label_names: tuple[str, ...] | None = None
    # A named label list resolved when weights are loaded ("imagenet-1k"), so that registry
    # listings stay small; see `resolve_label_names`.
    label_set: str | None = None
    # Where the weights come from: "hf-hub:org/repo[@rev]", "timm:<name>", a path, or None.
    source: str | None = None
    tag: str | None = None
    license: str | None = None
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def replace(self, **changes: Any) -> PretrainedCfg:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PretrainedCfg:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        for key in ("input_size", "mean", "std", "label_names"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        return cls(**values)


def resolve_label_names(cfg: PretrainedCfg) -> tuple[str, ...] | None:
    """The cfg's label names, from `label_names` or the named `label_set`."""
    if cfg.label_names is not None:
        return cfg.label_names
    if cfg.label_set == "imagenet-1k":
        from .imagenet_labels import IMAGENET1K_LABELS

        return IMAGENET1K_LABELS
    if cfg.label_set is not None:
        raise ValueError(f"unknown label_set {cfg.label_set!r}; known: 'imagenet-1k'")
    return None


# Models carry their PretrainedCfg as a plain attribute, `model.pretrained_cfg`. Builders may return
# any nn.Module (plugins), whose `__getattr__` is typed `Tensor | Module`: these two helpers are the
# typed way to read and write the attribute on a module of unknown class.
_ATTR = "pretrained_cfg"


def pretrained_cfg_of(model: object) -> PretrainedCfg | None:
    """`model.pretrained_cfg` if the model carries a PretrainedCfg there, else None."""
    cfg = getattr(model, _ATTR, None)
    return cfg if isinstance(cfg, PretrainedCfg) else None


def attach_pretrained_cfg(model: object, cfg: PretrainedCfg) -> None:
    """Set `model.pretrained_cfg = cfg` on any model (a plain attribute: nn.Module stores it as is)."""
    setattr(model, _ATTR, cfg)
