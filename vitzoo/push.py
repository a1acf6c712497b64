"""Pushing a model to the Hugging Face Hub in the layout that loads in the most places:
`push_to_hub(model, "org/name")`, also `model.push_to_hub(...)` for a model vitzoo.create or
from_pretrained made (the builder hands it `write_repo`) and `vitzoo push RUN_DIR_OR_WEIGHTS REPO_ID`.

* timm's, where the model's registered architecture has a timm counterpart (`ZooModel.timm_name`)
  and every field the model changed is one that timm's VisionTransformer takes as an argument:
  config.json names the timm architecture, its `model_args`, `num_classes`, `label_names` and the
  `pretrained_cfg` (preprocessing, licence) as timm's own `save_for_hf` writes them, and
  model.safetensors holds timm's names. `timm.create_model("hf-hub:REPO", pretrained=True)`,
  transformers' `AutoModelForImageClassification.from_pretrained(REPO)` (its TimmWrapper) and
  `vitzoo.create("hf-hub:REPO")` load it.
* vitzoo's (`save_pretrained`) otherwise; one line (a log warning, and the model card) says why
  timm and transformers cannot load it.

The upload itself (one commit, its timeout, what a failure changed, nothing local made public) is
vitzoo/upload.py's, which any model reaches without the registry.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from . import registry
from .atomic import write_json
from .layout import CONFIG_NAME, WEIGHTS_NAME
from .model import ViTConfig, timm_architecture_cfg
from .model_card import CardFacts
from .pretrained_cfg import PretrainedCfg, resolve_label_names
from .upload import (
    DEFAULT_MAX_SHARD_SIZE,
    NO_ARCHITECTURE,
    PUSH_TIMEOUT_ENV,
    TIMM_LAYOUT,
    VITZOO_LAYOUT,
    HubPushError,
    PushInfo,
    RepoFiles,
    finish_repo,
    public_pretrained_cfg,
    public_value,
    write_vitzoo_repo,
)
from .upload import push_to_hub as _upload
from .weight_shards import parse_shard_size, write_weights
from .weights.exporter import timm_state_dict
from .weights.timm_files import TIMM_MODEL_ARGS

__all__ = [
    "PUSH_TIMEOUT_ENV",
    "TIMM_LAYOUT",
    "VITZOO_LAYOUT",
    "HubPushError",
    "PushInfo",
    "RepoFiles",
    "push_to_hub",
    "timm_counterpart",
    "timm_hub_config",
    "write_repo",
]

# Fields that change training only (dropout, stochastic depth): timm builds its model without them.
_TRAINING_ONLY = ("drop_rate", "attn_drop_rate", "drop_path_rate")
# ViTConfig fields that timm's VisionTransformer takes under the same name (timm_files reads them back).
_TIMM_ARGS = (*TIMM_MODEL_ARGS, "dynamic_img_size")


def timm_counterpart(model: nn.Module) -> tuple[str, dict[str, Any]] | str:
    """(timm architecture, model_args) under which timm builds `model` with the same parameter
    names, shapes and computation; or a string saying why timm has no such model."""
    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        return f"{type(model).__name__} is not a vitzoo VisionTransformer"
    name = getattr(model, "architecture", None)
    if not isinstance(name, str):
        return NO_ARCHITECTURE
    try:
        entry = registry.get_entry(name)
    except registry.UnknownModelError:
        return f"its architecture {name!r} is not registered here"
    if entry.timm_name is None:
        return f"{name} has no timm counterpart (ZooModel.timm_name)"
    base = entry.resolve_config().to_dict()
    changed = {k: v for k, v in config.to_dict().items() if v != base[k] and k not in _TRAINING_ONLY}
    changed.pop("num_classes", None)  # timm's config.json states it at the top level
    foreign = sorted(k for k in changed if k not in _TIMM_ARGS)
    if foreign:
        shown = ", ".join(f"{k}={changed[k]!r}" for k in foreign)
        return f"{name} differs from timm's {entry.timm_name} in {shown}, which timm cannot build"
    args = {k: (list(v) if isinstance(v, tuple) else v) for k, v in changed.items()}
    if "global_pool" in args or "fc_norm" in args:  # timm's fc_norm=None means "avg" pooling's own choice
        args["fc_norm"] = config.fc_norm
    return entry.timm_name, args


def timm_hub_config(
    model: nn.Module, timm_name: str, model_args: dict[str, Any], pcfg: PretrainedCfg
) -> dict[str, Any]:
    """config.json as timm's `save_for_hf` writes it (what timm and transformers' TimmWrapper read)."""
    config: ViTConfig = model.config  # type: ignore[assignment]
    labels = resolve_label_names(pcfg) if pcfg.num_classes == config.num_classes else None
    pretrained = {
        "custom_load": False,  # plain timm names: timm's own loader, no conversion
        "input_size": list(pcfg.input_size),
        "interpolation": pcfg.interpolation,
        "crop_pct": pcfg.crop_pct,
        "crop_mode": pcfg.crop_mode,
        "mean": list(pcfg.mean),
        "std": list(pcfg.std),
        "num_classes": config.num_classes,
        "pool_size": None,
        **timm_architecture_cfg(config),
    }
    if pcfg.license:
        pretrained["license"] = pcfg.license
    hub: dict[str, Any] = {
        "architecture": timm_name,
        "num_classes": config.num_classes,
        "num_features": int(getattr(model, "num_features", config.embed_dim)),
    }
    if config.global_pool:
        hub["global_pool"] = config.global_pool
    if model_args:
        hub["model_args"] = model_args
    if labels:
        hub["label_names"] = list(labels)
    hub["pretrained_cfg"] = pretrained
    return hub


def write_repo(
    model: nn.Module,
    directory: str | os.PathLike[str],
    *,
    repo_id: str,
    license: str | None = None,
    run: dict[str, Any] | None = None,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
) -> RepoFiles:
    """Write the repository's files into `directory`: config.json, model.safetensors (above
    `max_shard_size`: its shards and their index) and README.md, in timm's layout where timm has
    the model, else in vitzoo's (module docstring). `license` replaces the licence the model's
    pretrained cfg states; either must be a licence id (`check_license`). Every string of
    config.json and the card passes through `public_value`."""
    counterpart = timm_counterpart(model)
    if isinstance(counterpart, str):  # write_vitzoo_repo checks max_shard_size before it writes
        return write_vitzoo_repo(
            model,
            directory,
            repo_id=repo_id,
            license=license,
            run=run,
            max_shard_size=max_shard_size,
            why_not_timm=counterpart,
        )
    parse_shard_size(max_shard_size)  # before anything is written
    timm_name, model_args = counterpart
    directory = Path(directory)
    pcfg = public_pretrained_cfg(model, license)
    directory.mkdir(parents=True, exist_ok=True)
    state = timm_state_dict(model)  # LoRA merged, as save_pretrained does
    write_weights(directory, state, name=WEIGHTS_NAME, max_shard_size=max_shard_size, metadata={"format": "pt"})
    write_json(directory / CONFIG_NAME, public_value(timm_hub_config(model, timm_name, model_args, pcfg)))
    facts = CardFacts(repo_id, TIMM_LAYOUT, timm_name, model_args, None, pcfg, public_value(run))
    return finish_repo(model, directory, facts)


def push_to_hub(model: nn.Module, repo_id: str, **options: Any) -> PushInfo:
    """Upload `model` to `repo_id` as one commit, in timm's layout where timm has the model, else
    in vitzoo's (`write_repo`). The keywords are vitzoo/upload.py's `push_to_hub`'s: private=False,
    revision=None, commit_message, token=None, license=None, run=None, max_shard_size="5GB"."""
    return _upload(model, repo_id, writer=write_repo, **options)
