"""Finishing a load: a `Checkpoint` (checkpoint.py, read by sources.py) put into a model that the
caller (vitzoo/builder.py) built. `load_checkpoint` verifies that it fits (verify.py), adapts it
(adapt.py) and loads it; `build_args` says which builder arguments the checkpoint decides,
`vit_config` the whole config of a checkpoint that states one, and `pretrained_cfg_for` the
preprocessing and labels that travel with the loaded weights.

Models that receive a whole checkpoint are built on the meta device and the checkpoint tensors are
assigned to them (`load_state_dict(assign=True)`): no random initialisation that would be
overwritten, and no second copy of the weights in memory. An assigned tensor must be laid out as
a freshly built parameter is (contiguous, in storage of its own, at an address aligned as torch's
CPU allocator aligns): safetensors hands out views into its memory map of the file, at whatever
offset the tensor has in the file, and the CPU matmul kernels reduce in another order for weights
at an unaligned address, so a reloaded model would compute different last bits than the model
that was saved. Such tensors are copied (`_owned`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..layers import RMSNorm, to_2tuple
from ..model import VisionTransformer, ViTConfig
from ..precision import describe_nonfinite, nonfinite_tensors
from ..pretrained_cfg import PretrainedCfg, check_pretrained_fields, resolve_label_names
from .adapt import FitReport, fit_state_dict
from .checkpoint import ROPE_SETTINGS, Checkpoint
from .errors import WeightsFileError, WeightsMismatchError
from .verify import check_fits

logger = logging.getLogger("vitzoo.weights")


def load_checkpoint(
    model: nn.Module,
    ckpt: Checkpoint,
    *,
    strict: bool = True,
    assign: bool | None = None,
    dtype: torch.dtype | None = None,
) -> FitReport:
    """Load `ckpt` into `model`. The checkpoint is adapted to the model where that is well defined
        (num_classes, img_size, in_chans, each logged; see adapt.py); anything else that does not fit
        raises a WeightsMismatchError. A checkpoint that states a LayerNorm eps (transformers: 1e-12)
        sets it on the model and in `model.config`. The checkpoint's tensors are assigned to the model
        (`assign`; None: when it has parameters on the meta device, built to be filled). strict=False
        loads the keys that fit and reports the rest in the returned FitReport. The tensors are handed
        over: `ckpt.state` is emptied. Tensors holding NaN or infinite values load with one warning
        naming them (vitzoo predict, eval and export refuse such a model). A checkpoint read as shapes
    alone (weights.files.reading_only) leaves its tensors on the meta device, to be filled later
    (vitzoo/train/fsdp_load.py). With `dtype` (and `assign`)
        the floating tensors load in that dtype rather than the model's, each converted on its own."""
    check_fits(model, ckpt)
    # a checkpoint read as shapes alone (files.reading_only) builds the model without its weights
    shapes_only = bool(ckpt.state) and all(t.is_meta for t in ckpt.state.values())
    config = getattr(model, "config", None)
    if config is not None and "norm_eps" in ckpt.declared and ckpt.config["norm_eps"] != config.norm_eps:
        _set_norm_eps(model, float(ckpt.config["norm_eps"]))
        logger.info("%s: LayerNorm eps set to the checkpoint's %g", ckpt.file, ckpt.config["norm_eps"])
    state, report = fit_state_dict(
        ckpt.state,
        model,
        file=ckpt.file,
        strict=strict,
        src_grid=ckpt.src_grid,
        antialias=ckpt.pos_antialias,
        dtype=dtype,
        pos_mode=ckpt.pos_mode,
    )
    ckpt.state = {}  # drop our reference: the model now owns the tensors
    if assign is None:
        assign = any(p.is_meta for p in model.parameters())
    if assign:
        state = _owned(state)
    model.load_state_dict(state, strict=strict, assign=assign)
    _rebuild_non_persistent_buffers(model)
    leftover = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if leftover and not shapes_only:
        raise WeightsMismatchError(
            f"{ckpt.file}: no values for {', '.join(leftover[:10])} (the model was built without data)"
        )
    nonfinite = nonfinite_tensors(model)
    if nonfinite:  # loaded as asked (a run may be inspected), said once; predict, eval and export refuse it
        warnings.warn(describe_nonfinite(nonfinite, str(ckpt.file)), stacklevel=2)
    if report.missing or report.unexpected:
        logger.warning(
            "%s: loaded non-strictly; missing: %s; unexpected: %s",
            ckpt.file,
            ", ".join(report.missing) or "none",
            ", ".join(report.unexpected) or "none",
        )
    return report


def _rebuild_non_persistent_buffers(model: nn.Module) -> None:
    """Buffers that no checkpoint holds (derived from the config: a rotary embedding's table, a
    zero key bias) stay on the meta device when the model was built there; each module that has
    such buffers recomputes them with its `init_non_persistent_buffers()` (timm's name for it)."""
    for module in model.modules():
        rebuild = getattr(module, "init_non_persistent_buffers", None)
        if callable(rebuild) and any(b.is_meta for b in module.buffers(recurse=False)):
            rebuild()


def build_args(ckpt: Checkpoint, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The builder arguments the checkpoint decides where `overrides` leave them open: its class
    count and whether its head has a bias, the image size, the LayerNorm eps, the activation and the
    rotary embedding's settings (transformers' DINOv3 rope_theta) its config states, so a model
    saved at 384 is rebuilt at 384 rather than resampled."""
    carried: dict[str, Any] = {}
    if "num_classes" not in overrides:
        carried["num_classes"] = ckpt.config.get("num_classes", 0)
        if "head_bias" not in overrides and ckpt.config.get("head_bias") is False:
            carried["head_bias"] = False  # CLIP's projection, as transformers stores it
    for name in ("norm_eps", "img_size", "act_layer", *ROPE_SETTINGS):
        if name not in overrides and name in ckpt.declared:
            carried[name] = ckpt.config[name]
    return carried


def vit_config(ckpt: Checkpoint) -> ViTConfig:
    """The whole ViTConfig of a checkpoint whose source states it (a config.json, or a named
    architecture for what its config leaves out); WeightsMismatchError when it does not."""
    if "num_heads" not in ckpt.declared:
        raise WeightsMismatchError(
            f"{ckpt.file}: the number of attention heads is not stated by this source (no config.json naming it); "
            "use vitzoo.create('<registered name>', weights=...) to name the architecture"
        )
    try:
        return ViTConfig.from_dict(ckpt.config)
    except (TypeError, ValueError) as e:
        raise WeightsMismatchError(f"{ckpt.file}: the source describes an invalid ViT config ({e})") from e


# torch's CPU allocator aligns every allocation to this many bytes; kernels pick their code path by it.
_CPU_ALIGNMENT = 64


def _owned(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with each tensor that is not laid out as a fresh allocation (unaligned, strided, or
    part of a larger storage) replaced by a contiguous copy in storage of its own. One tensor at a
    time, dropping the original as it goes, so at most one extra tensor is held."""
    for key in list(state):
        t = state[key]
        fresh = (
            t.is_contiguous()
            and t.storage_offset() == 0
            and t.untyped_storage().nbytes() == t.numel() * t.element_size()
            and t.data_ptr() % _CPU_ALIGNMENT == 0
        )
        if not fresh and not t.is_meta and t.numel():
            state[key] = t.clone(memory_format=torch.contiguous_format)
    return state


def _set_norm_eps(model: nn.Module, eps: float) -> None:
    for module in model.modules():
        if isinstance(module, (nn.LayerNorm, RMSNorm)):
            module.eps = eps
    if isinstance(model, VisionTransformer):
        model.config = model.config.replace(norm_eps=eps)


def pretrained_cfg_for(
    ckpt: Checkpoint, model: nn.Module, base: PretrainedCfg | None, *, describes: bool | None = None
) -> PretrainedCfg:
    """The checkpoint's preprocessing and labels, fitted to the model it was loaded into (its input
    size; labels only if the class count is the same). Later wins:
        base            the model's or architecture's cfg (no weights), or a weights tag's cfg
        ckpt.implied    what the layout implies (torchvision's transform, ...), unless `base`
                        describes these very weights (`describes`; by default: a registered
                        source, whose `source` is set; a weights tag loaded from another copy)
        ckpt.pretrained what the source's own files state (config.json, preprocessor_config.json)
    """
    cfg = base or PretrainedCfg()
    describes = cfg.source is not None if describes is None else describes
    # check_pretrained_fields keeps the PretrainedCfg fields, as tuples where JSON has lists
    updates = check_pretrained_fields(ckpt.implied) if not describes else {}
    updates.update(check_pretrained_fields(ckpt.pretrained))
    if "label_names" in updates:
        updates.setdefault("label_set", None)
    elif "label_set" in updates:
        updates["label_names"] = None  # the base's names belong to other weights
    if updates:
        cfg = cfg.replace(**updates)
    ckpt_classes = ckpt.config.get("num_classes", cfg.num_classes)
    stated = updates.get("label_names") if "label_names" in ckpt.pretrained else None
    if stated is not None and len(stated) != ckpt_classes:
        raise WeightsFileError(
            f"{ckpt.file}: label_names has {len(stated)} names for the weights' head of {ckpt_classes} classes; "
            "expected one name per class"
        )
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
        source=cfg.source or ckpt.file,
    )
