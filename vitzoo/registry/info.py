"""What a registered name is, as plain data, without allocating: `model_summary` (what `vitzoo
list` shows), `model_info` (config, parameter count, sources, origin), timm's whole pretrained cfg
(`timm_pretrained_cfg`, `get_pretrained_cfg_value`) and the preprocessing a model carries without
weights (`weightless_cfg`). A config is read as arithmetic; a builder entry is built on the meta
device (`build_meta`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from ..cards import card
from ..model import ViTConfig, fit_pretrained_cfg, timm_default_cfg
from ..pretrained_cfg import PretrainedCfg, pretrained_cfg_of
from .entry import ModelEntry, Resolved
from .names import as_resolved


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_meta(name: str | Resolved, **overrides: Any) -> nn.Module:
    """The registered model `name` built on the meta device, a tag's own fields (e.g. the
    activation its weights need) included: its shapes, parameter count and bytes, nothing allocated."""
    resolved = as_resolved(name)
    with torch.device("meta"):
        return resolved.entry.builder(**{**resolved.model_args, **overrides})


def _architecture(resolved: Resolved) -> tuple[ViTConfig | None, nn.Module | None]:
    """The ViTConfig a resolved name builds, and the model built on the meta device where it had to
    be (a builder entry; None for a config, whose figures are arithmetic)."""
    if resolved.config is not None:
        return resolved.config, None
    model = build_meta(resolved)
    config = getattr(model, "config", None)
    return (config if isinstance(config, ViTConfig) else None), model


def model_summary(name: str | Resolved) -> dict[str, Any]:
    """What a listing shows of a name, without building it where it is a config (`vitzoo list`
    lists hundreds): name, family, origin, timm counterpart, aliases, config (a ViTConfig or None),
    parameter count, the pretrained tags, the preprocessing's input size."""
    resolved = as_resolved(name)
    entry = resolved.entry
    config, model = _architecture(resolved)
    if model is not None:
        num_params = count_parameters(model)
    else:
        assert config is not None  # _architecture builds what is no config
        num_params = config.num_params
    return {
        "name": entry.name,
        "family": entry.family,
        "origin": entry.origin,
        "timm_name": entry.timm_name,
        "aliases": [dataclasses.asdict(a) for a in entry.aliases],
        "config": config,
        "num_params": num_params,
        "pretrained": list(entry.pretrained),
        "input_size": list(_preprocessing(resolved, config, model).input_size),
    }


def model_info(name: str | Resolved) -> dict[str, Any]:
    """Config, parameter count, pretrained sources and origin of a registered model (plain data).
    Nothing is allocated: a builder entry is built on the meta device to count its parameters.
    "preprocessing" is timm's whole pretrained cfg of the name (`timm_pretrained_cfg`)."""
    resolved = as_resolved(name)
    entry, pcfg = resolved.entry, resolved.pretrained_cfg
    summary = model_summary(resolved)
    config = summary.pop("config")
    del summary["input_size"], summary["pretrained"]
    return {
        **summary,
        "description": entry.description,
        "config": config.to_dict() if config is not None else None,
        "default_pretrained": pcfg.tag if pcfg else None,
        "pretrained": {tag: cfg.to_dict() for tag, cfg in entry.pretrained.items()},
        "preprocessing": timm_pretrained_cfg(resolved),
        "card": card(resolved),  # accuracy, licence, pooling, ... (vitzoo/cards.py)
    }


def timm_pretrained_cfg(name: str | Resolved) -> dict[str, Any]:
    """timm's whole pretrained cfg of `name` ("name" or "name.tag", any spelling), one dict: the
    preprocessing of the source the tag (or the default tag) selects, or of the name without
    weights, and the keys timm derives from the architecture (fixed_input_size, first_conv,
    classifier: the architecture the tag builds). The same keys and values as the `default_cfg`
    of the model `create(name)` builds; nothing is built where the name is a config."""
    resolved = as_resolved(name)
    config, model = _architecture(resolved)
    cfg = _preprocessing(resolved, config, model)
    return timm_default_cfg(cfg, config) if config is not None else cfg.to_dict()


def _preprocessing(resolved: Resolved, config: ViTConfig | None, model: nn.Module | None) -> PretrainedCfg:
    """The pretrained cfg of a resolved name: its source's, or the one it carries without weights
    (`model`: a builder entry's model, whose own cfg comes after the entry's)."""
    entry, pcfg = resolved.entry, resolved.pretrained_cfg
    own = pretrained_cfg_of(model) if model is not None else None
    if config is None:  # a plugin builder that makes no ViT: its cfg alone
        return pcfg or entry.default_cfg or own or PretrainedCfg()
    return pcfg or weightless_cfg(entry, config) or own or fit_pretrained_cfg(PretrainedCfg(), config)


def get_pretrained_cfg_value(name: str, key: str) -> Any:
    """timm's `get_pretrained_cfg_value(model_name, cfg_key)` for a registered name, for code
    written for timm: the value of `key` in the name's pretrained cfg (`timm_pretrained_cfg`:
    the tag's, else the default tag's), None where the cfg has no such key (timm's
    min_input_size, hf_hub_id, ...). An unknown name or tag raises UnknownModelError."""
    return timm_pretrained_cfg(name).get(key)


def weightless_cfg(entry: ModelEntry, config: ViTConfig, named: PretrainedCfg | None = None) -> PretrainedCfg | None:
    """The preprocessing a model of `config` built under `entry`'s name carries without weights:
    that of the `named` source (a tag built untrained), else the entry's, fitted to the model
    (input size, class count); None where there is none."""
    cfg = named.without_weights() if named is not None else entry.default_cfg
    if cfg is None:
        return None
    fitted = fit_pretrained_cfg(cfg, config)
    own_table = entry.config is not None and config.img_size == entry.config.img_size
    if entry.pretrained and config.dynamic_img_size and own_table:
        # Any input size, at the table of the name's own releases: their evaluation size stays
        # (timm's NaFlexVit evaluates at a larger size than its table's grid).
        fitted = fitted.replace(input_size=(config.in_chans, *cfg.input_size[1:]))
    return fitted
