"""Building models by name: the one place where the registry (names, configs, sources) meets
vitzoo.weights (reading and converting checkpoints), as timm's `_builder.py` does.

    vitzoo.create("vit_b16", num_classes=10)                         # random init, config overrides
    vitzoo.create("vit_b16", pretrained=True)                        # the name's default source
    vitzoo.create("vit_b16.augreg_in21k_ft_in1k")                    # a tag picks another source
    vitzoo.create("vit_s16", weights="ViT-S_16.npz")                 # any file / dir / hub / timm source
    vitzoo.from_pretrained("out/")                                   # the architecture comes from the source
    vitzoo.download("vit_b16"); vitzoo.convert("src", "dst/")

Every function here that reads a source hands vitzoo.weights `resolve_architecture`, so names a
checkpoint states (vitzoo's or timm's "architecture") mean what the registry says they mean.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import registry
from .atomic import write_safetensors
from .layers import to_2tuple
from .layout import save_pretrained
from .model import ViTConfig
from .precision import parse_dtype
from .pretrained_cfg import PretrainedCfg, attach_pretrained_cfg, check_pretrained_fields, pretrained_cfg_of
from .weights import Architecture, WeightsError, WeightsNotFoundError, export, load
from .weights.adapt import FitReport
from .weights.exporter import EXPORT_FORMATS
from .weights.hub import HF_PREFIX, TIMM_PREFIX, fetch_source

Source = str | os.PathLike[str]


def resolve_architecture(name: str) -> Architecture | None:
    """What a checkpoint's architecture name means: a registered vitzoo name, or the timm
    architecture of a registered entry. None when the registry knows neither."""
    try:
        entry: registry.ModelEntry | None = registry.get_entry(name)
    except registry.UnknownModelError:
        entry = registry.find_by_timm_name(name)
    if entry is None:
        return None
    try:
        config: dict[str, Any] | None = entry.resolve_config().to_dict()
    except (TypeError, ValueError, WeightsError):
        config = None  # a plugin builder that makes no ViT: its name still gives preprocessing
    return Architecture(entry.name, config, entry.default_cfg)


def create(
    name: str,
    pretrained: bool = False,
    weights: Source | None = None,
    pretrained_cfg_overlay: dict[str, Any] | None = None,
    dtype: str | torch.dtype | None = None,
    **overrides: Any,
) -> nn.Module:
    """Build a registered model; `overrides` replace config fields (num_classes, img_size, ...).

    pretrained=True loads the name's default source (or the one its ".tag" selects);
    weights=SOURCE loads a file, directory, "hf-hub:org/repo" or "timm:<name>" instead.
    `pretrained_cfg_overlay` (as in timm) replaces preprocessing fields of `model.pretrained_cfg`
    (mean, std, crop_pct, crop_mode, interpolation, label_names, ...): the user's word wins over
    the checkpoint's. `dtype` ("fp32", "bf16", "fp16", "auto" or a torch dtype) casts the model
    for inference (see vitzoo/precision.py); None keeps fp32."""
    model = _create(name, pretrained, weights, **overrides)
    if dtype is not None:
        model.to(parse_dtype(dtype, "cpu")[0])
    if pretrained_cfg_overlay:
        cfg = pretrained_cfg_of(model) or PretrainedCfg()
        unknown = sorted(set(pretrained_cfg_overlay) - set(cfg.to_dict()))
        if unknown:
            raise TypeError(
                f"pretrained_cfg_overlay: unknown field(s) {', '.join(map(repr, unknown))}; "
                f"valid fields: {', '.join(cfg.to_dict())}"
            )
        changes = check_pretrained_fields(pretrained_cfg_overlay)
        attach_pretrained_cfg(model, cfg.replace(**changes))
    return model


def _create(name: str, pretrained: bool, weights: Source | None, **overrides: Any) -> nn.Module:
    entry, pcfg = registry.get_pretrained_cfg(name)
    _, tag = registry.split_name(name)
    if tag is not None and not pretrained and weights is None:
        pretrained = True  # naming a weights tag means asking for those weights
    if pretrained or weights is not None:
        if weights is None:
            if pcfg is None or pcfg.source is None:
                raise WeightsError(
                    f"model {entry.name!r} has no pretrained weights registered; pass weights=<file, directory, "
                    "'hf-hub:org/repo' or 'timm:<name>'> (vitzoo.list_models(pretrained=True) lists names with weights)"
                )
            source: Source = pcfg.source
            base_cfg: PretrainedCfg | None = pcfg
        else:
            source, base_cfg = weights, entry.default_cfg
        return load.build_pretrained(
            entry.builder, source, base_cfg=base_cfg, architecture=entry.name, resolve=resolve_architecture, **overrides
        )
    model = entry.builder(**overrides)
    if entry.default_cfg is not None and hasattr(model, "pretrained_cfg"):
        attach_pretrained_cfg(model, _fit_cfg(entry.default_cfg, model))
    return model


def _fit_cfg(cfg: PretrainedCfg, model: nn.Module) -> PretrainedCfg:
    """The entry's preprocessing, with input size and class count of the model actually built."""
    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        return cfg
    size = (config.in_chans, *to_2tuple(config.img_size))
    labels = cfg.label_names if config.num_classes == cfg.num_classes else None
    return cfg.replace(input_size=size, num_classes=config.num_classes, label_names=labels)


def load_weights(model: nn.Module, source: Source, *, strict: bool = True) -> FitReport:
    """Load `source` into `model` (see vitzoo.weights.load.load_weights), names resolved by the registry."""
    return load.load_weights(model, source, strict=strict, resolve=resolve_architecture)


def from_pretrained(source: Source) -> nn.Module:
    """A model rebuilt from a saved directory, a file whose layout names the architecture, or
    "hf-hub:org/repo[@rev]" (see vitzoo.weights.load.from_pretrained)."""
    return load.from_pretrained(source, resolve=resolve_architecture)


def download(name_or_source: str) -> list[Path]:
    """Fetch a model's weights into the Hugging Face cache ahead of time (for offline use later)
    and return the cached files. Takes a registered name ("vit_b16", "vit_b16.augreg_in21k_ft_in1k"),
    "hf-hub:org/repo[@rev]" or "timm:<timm name>"."""
    source = name_or_source
    if not (source.startswith(HF_PREFIX) or source.startswith(TIMM_PREFIX)):
        entry, pcfg = registry.get_pretrained_cfg(source)
        if pcfg is None or pcfg.source is None:
            raise WeightsError(f"model {entry.name!r} has no pretrained weights to download")
        source = pcfg.source
    if source.startswith(HF_PREFIX) or source.startswith(TIMM_PREFIX):
        return fetch_source(source)
    path = Path(source)
    if not path.exists():
        raise WeightsNotFoundError(f"{name_or_source!r}: its weights source {source!r} does not exist")
    return [path]


def convert(src: Source, dst: Source, *, to: str = "vitzoo", model: str | nn.Module | None = None) -> Path:
    """Read `src` (any source load_weights takes) and write it to `dst` in vitzoo's layout
    (a directory; or a single file if `dst` ends in .safetensors) or as a timm safetensors file.

    `model` names the architecture (a registered name, e.g. "vit_b16") when the source does not
    state it (a bare weights file); it may also change num_classes/img_size via adaptation by
    passing a model instance already built as wanted."""
    if to not in EXPORT_FORMATS:
        raise ValueError(f"convert: unknown target format to={to!r}; expected one of {', '.join(EXPORT_FORMATS)}")
    if model is None:
        built = from_pretrained(src)
    elif isinstance(model, str):
        built = create(model, weights=src)
    elif isinstance(model, nn.Module):
        load_weights(model, src)
        built = model
    else:
        raise TypeError(f"convert: model must be None, a registered name or an nn.Module, got {type(model).__name__}")
    dst = Path(dst)
    if to == "timm":
        return export(built, "timm", dst if dst.suffix == ".safetensors" else dst / "model.safetensors")
    if dst.suffix == ".safetensors":
        return write_safetensors(dst, built.state_dict(), metadata={"format": "pt"})
    return save_pretrained(built, dst)
