"""Putting weights into models: `load_weights`, `build_pretrained` (behind `vitzoo.create`) and
`from_pretrained`.

Models that receive a whole checkpoint are built on the meta device and the checkpoint tensors are
assigned to them (`load_state_dict(assign=True)`): no random initialisation that would be
overwritten, and no second copy of the weights in memory.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..layers import to_2tuple
from ..layout import attach_architecture
from ..model import VisionTransformer, ViTConfig
from ..pretrained_cfg import (
    PretrainedCfg,
    attach_pretrained_cfg,
    check_pretrained_fields,
    pretrained_cfg_of,
    resolve_label_names,
)
from .adapt import FitReport, fit_state_dict
from .errors import WeightsMismatchError
from .sources import Resolve, SourceData, load_source

logger = logging.getLogger("vitzoo.weights")

Source = str | os.PathLike[str]


def load_weights(model: nn.Module, source: Source, *, strict: bool = True, resolve: Resolve | None = None) -> FitReport:
    """Load `source` (file, directory, "hf-hub:org/repo[@rev]" or "timm:<name>") into `model`.

    The checkpoint is adapted to the model where that is well defined (num_classes, img_size,
    in_chans, each logged; see adapt.py); anything else that does not fit raises a
    WeightsMismatchError. A source that states a LayerNorm eps (transformers: 1e-12) sets it on
    the model and in `model.config`.
    strict=False loads the keys that fit and reports the rest in the returned FitReport."""
    data = load_source(source, resolve)
    return _load_into(model, data, strict=strict, assign=_on_meta(model))


def build_pretrained(
    build: Callable[..., nn.Module],
    source: Source,
    *,
    base_cfg: PretrainedCfg | None = None,
    architecture: str | None = None,
    resolve: Resolve | None = None,
    **overrides: Any,
) -> nn.Module:
    """`build(**overrides)` on the meta device, filled from `source`. The checkpoint decides what
    `overrides` leave open (its class count and whether its head has a bias, the image size, the
    LayerNorm eps and the activation its config states), so a model saved at 384 is rebuilt at 384
    rather than resampled; `base_cfg` is the preprocessing the source's own config refines, and
    when it describes a registered source, its `model_args` say what these weights need beyond the
    architecture; `architecture` is recorded for save_pretrained."""
    data = load_source(source, resolve)
    carried: dict[str, Any] = {}
    if "num_classes" not in overrides:
        carried["num_classes"] = data.config.get("num_classes", 0)
        if "head_bias" not in overrides and data.config.get("head_bias") is False:
            carried["head_bias"] = False  # CLIP's projection, as transformers stores it
    for name in ("norm_eps", "img_size", "act_layer"):
        if name not in overrides and name in data.declared:
            carried[name] = data.config[name]
    if base_cfg is not None:
        carried.update({k: v for k, v in base_cfg.model_args.items() if k not in overrides})
    with torch.device("meta"):
        model = build(**overrides, **carried)
    _load_into(model, data, strict=True, assign=True)
    attach_pretrained_cfg(model, _pretrained_cfg(base_cfg, data, model))
    if architecture is not None:
        attach_architecture(model, architecture)
    return model


def from_pretrained(source: Source, resolve: Resolve | None = None) -> nn.Module:
    """A model rebuilt from a saved directory (vitzoo, transformers or timm layout), a file whose
    layout names the architecture, or "hf-hub:org/repo[@rev]"; the config comes from the source
    (and, for a named architecture, from what `resolve` says of it)."""
    data = load_source(source, resolve)
    fields = {k: v for k, v in data.config.items() if not k.startswith("_")}
    if "num_heads" not in data.declared:
        raise WeightsMismatchError(
            f"{data.file}: the number of attention heads is not stated by this source (no config.json naming it); "
            "use vitzoo.create('<registered name>', weights=...) to name the architecture"
        )
    try:
        config = ViTConfig.from_dict(fields)
    except (TypeError, ValueError) as e:
        raise WeightsMismatchError(f"{data.file}: the source describes an invalid ViT config ({e})") from e
    with torch.device("meta"):
        model = VisionTransformer(config)
    _load_into(model, data, strict=True, assign=True)
    base: PretrainedCfg | None = None
    if data.architecture:
        arch = resolve(data.architecture) if resolve is not None else None
        base = arch.default_cfg if arch is not None else None
        attach_architecture(model, data.architecture)
    model.pretrained_cfg = _pretrained_cfg(base, data, model)
    return model


# ----------------------------------------------------------------------------- internals
def _on_meta(model: nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


def _load_into(model: nn.Module, data: SourceData, *, strict: bool, assign: bool) -> FitReport:
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "num_heads") and "num_heads" in data.declared:
        if data.config["num_heads"] != config.num_heads:
            # No tensor shape depends on the head count: loading would "work" and compute garbage.
            raise WeightsMismatchError(
                f"{data.file}: the checkpoint was trained with num_heads={data.config['num_heads']}, the model "
                f"has num_heads={config.num_heads}; expected equal head counts"
            )
    act = data.config.get("act_layer")
    if config is not None and hasattr(config, "act_layer") and "act_layer" in data.declared and act != config.act_layer:
        # Like the head count, the activation shapes no tensor: the weights would load and compute
        # something else than they were trained to.
        raise WeightsMismatchError(
            f"{data.file}: the checkpoint was trained with act_layer={act!r}, the model has "
            f"act_layer={config.act_layer!r}; expected the same activation (build the model with act_layer={act!r})"
        )
    if config is not None and "norm_eps" in data.declared and data.config["norm_eps"] != config.norm_eps:
        _set_norm_eps(model, float(data.config["norm_eps"]))
        logger.info("%s: LayerNorm eps set to the checkpoint's %g", data.file, data.config["norm_eps"])
    state, report = fit_state_dict(
        data.state, model, file=data.file, strict=strict, src_grid=data.src_grid, antialias=data.pos_antialias
    )
    data.state = {}  # drop our reference: the model now owns the tensors
    model.load_state_dict(state, strict=strict, assign=assign)
    leftover = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if leftover:
        raise WeightsMismatchError(
            f"{data.file}: no values for {', '.join(leftover[:10])} (the model was built without data)"
        )
    if report.missing or report.unexpected:
        logger.warning(
            "%s: loaded non-strictly; missing: %s; unexpected: %s",
            data.file,
            ", ".join(report.missing) or "none",
            ", ".join(report.unexpected) or "none",
        )
    pcfg = pretrained_cfg_of(model)
    if pcfg is not None:  # its cfg described other weights (or none): these weights' own cfg refines it
        attach_pretrained_cfg(model, _pretrained_cfg(pcfg.replace(source=None, tag=None), data, model))
    return report


def _set_norm_eps(model: nn.Module, eps: float) -> None:
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.eps = eps
    if isinstance(model, VisionTransformer):
        model.config = model.config.replace(norm_eps=eps)


def _pretrained_cfg(base: PretrainedCfg | None, data: SourceData, model: nn.Module) -> PretrainedCfg:
    """The checkpoint's preprocessing and labels, fitted to the model actually built (its input
    size; labels only if the class count is the same). Later wins:
        base            the model's or architecture's cfg (no weights), or a registered source's cfg
        data.implied    what the layout implies (torchvision's transform, ...), unless `base`
                        describes these very weights (a registered source: its `source` is set)
        data.pretrained what the source's own files state (config.json, preprocessor_config.json)
    """
    cfg = base or PretrainedCfg()
    # check_pretrained_fields keeps the PretrainedCfg fields, as tuples where JSON has lists
    updates = check_pretrained_fields(data.implied) if cfg.source is None else {}
    updates.update(check_pretrained_fields(data.pretrained))
    if "label_names" in updates:
        updates.setdefault("label_set", None)
    elif "label_set" in updates:
        updates["label_names"] = None  # the base's names belong to other weights
    if updates:
        cfg = cfg.replace(**updates)
    ckpt_classes = data.config.get("num_classes", cfg.num_classes)
    config = getattr(model, "config", None)
    if config is None:
        return cfg
    labels = resolve_label_names(cfg)
    if config.num_classes != ckpt_classes or (labels is not None and len(labels) != config.num_classes):
        labels = None
    return cfg.replace(
        input_size=(config.in_chans, *to_2tuple(config.img_size)),
        num_classes=config.num_classes,
        label_names=labels,
        source=cfg.source or data.file,
    )
