"""Pushing a model to the Hugging Face Hub: `push_to_hub(model, "org/name")`, also
`model.push_to_hub(...)` and `vitzoo push RUN_DIR_OR_WEIGHTS REPO_ID`.

The repository is written in the layout that loads in the most places:

* timm's, where the model's registered architecture has a timm counterpart (`ZooModel.timm_name`)
  and every field the model changed is one that timm's VisionTransformer takes as an argument:
  config.json names the timm architecture, its `model_args`, `num_classes`, `label_names` and the
  `pretrained_cfg` (preprocessing, licence) as timm's own `save_for_hf` writes them, and
  model.safetensors holds timm's names. `timm.create_model("hf-hub:REPO", pretrained=True)`,
  transformers' `AutoModelForImageClassification.from_pretrained(REPO)` (its TimmWrapper) and
  `vitzoo.create("hf-hub:REPO")` load it.
* vitzoo's (`save_pretrained`) otherwise; one line (a log warning, and the model card) says why
  timm and transformers cannot load it.

README.md is the model card (vitzoo/model_card.py). The files are written into a temporary
directory and uploaded as one commit (huggingface_hub's `create_commit`), so a push that fails or
is interrupted leaves the repository as it was. The token is huggingface_hub's to find: the
`token` argument, else HF_TOKEN, else the cached `hf auth login`; HF_ENDPOINT is honoured.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from . import registry
from .atomic import write_json
from .errors import VitzooError
from .layout import CONFIG_NAME, WEIGHTS_NAME, save_pretrained, set_hub_pusher
from .model import ViTConfig
from .model_card import CARD_NAME, CardFacts, model_card
from .pretrained_cfg import PretrainedCfg, pretrained_cfg_of, resolve_label_names
from .weights.exporter import export
from .weights.hub import NETWORK_ERRORS, parse_hub_ref
from .weights.timm_files import TIMM_MODEL_ARGS

logger = logging.getLogger("vitzoo.push")

TIMM_LAYOUT, VITZOO_LAYOUT = "timm", "vitzoo"
# Fields that change training only (dropout, stochastic depth): timm builds its model without them.
_TRAINING_ONLY = ("drop_rate", "attn_drop_rate", "drop_path_rate")
# ViTConfig fields that timm's VisionTransformer takes under the same name (timm_files reads them back).
_TIMM_ARGS = (*TIMM_MODEL_ARGS, "dynamic_img_size")


class HubPushError(VitzooError, OSError):
    """The Hub refused a push or could not be reached; the repository is unchanged."""


# What huggingface_hub raises when the Hub refuses or cannot be reached (HTTP errors are OSErrors),
# and ValueError for what it refuses before sending (no token for a write, a malformed answer).
_PUSH_ERRORS: tuple[type[BaseException], ...] = (*NETWORK_ERRORS, ValueError)


@dataclass(frozen=True)
class RepoFiles:
    """What `write_repo` wrote: the layout, timm's architecture and model_args (timm layout), or
    why timm and transformers cannot load it (vitzoo layout)."""

    directory: Path
    layout: str
    timm_name: str | None
    model_args: dict[str, Any]
    why_not_timm: str | None

    @property
    def files(self) -> list[Path]:
        return sorted(p for p in self.directory.iterdir() if p.is_file())


def timm_counterpart(model: nn.Module) -> tuple[str, dict[str, Any]] | str:
    """(timm architecture, model_args) under which timm builds `model` with the same parameter
    names, shapes and computation; or a string saying why timm has no such model."""
    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        return f"{type(model).__name__} is not a vitzoo VisionTransformer"
    name = getattr(model, "architecture", None)
    if not isinstance(name, str):
        return "the model names no registered architecture (it was not made by vitzoo.create or from_pretrained)"
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
        "fixed_input_size": not config.dynamic_img_size,
        "interpolation": pcfg.interpolation,
        "crop_pct": pcfg.crop_pct,
        "crop_mode": pcfg.crop_mode,
        "mean": list(pcfg.mean),
        "std": list(pcfg.std),
        "num_classes": config.num_classes,
        "pool_size": None,
        "first_conv": "patch_embed.proj",
        "classifier": ["head", "head_dist"] if config.distilled else "head",
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
) -> RepoFiles:
    """Write the repository's files into `directory`: config.json, model.safetensors and README.md,
    in timm's layout where timm has the model, else in vitzoo's (module docstring). `license`
    replaces the licence the model's pretrained cfg states."""
    directory = Path(directory)
    pcfg = pretrained_cfg_of(model) or PretrainedCfg()
    if license is not None:
        pcfg = pcfg.replace(license=license)
    counterpart = timm_counterpart(model)
    if isinstance(counterpart, str):
        files = RepoFiles(directory, VITZOO_LAYOUT, None, {}, counterpart)
        save_pretrained(model, directory)
        _state_license(directory / CONFIG_NAME, pcfg.license)
    else:
        timm_name, model_args = counterpart
        files = RepoFiles(directory, TIMM_LAYOUT, timm_name, model_args, None)
        directory.mkdir(parents=True, exist_ok=True)
        export(model, "timm", directory / WEIGHTS_NAME)
        write_json(directory / CONFIG_NAME, timm_hub_config(model, timm_name, model_args, pcfg))
    facts = CardFacts(repo_id, files.layout, files.timm_name, files.model_args, files.why_not_timm, pcfg, run)
    (directory / CARD_NAME).write_text(model_card(model, facts), encoding="utf-8")
    return files


def _state_license(path: Path, license: str | None) -> None:
    """vitzoo's config.json with the licence the push states (save_pretrained writes the model's)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("pretrained_cfg", {}).get("license") != license:
        data.setdefault("pretrained_cfg", {})["license"] = license
        write_json(path, data)


def not_loadable_line(repo_id: str, why: str) -> str:
    """The one line saying that timm and transformers cannot load a repository, and why."""
    return (
        f"timm and transformers cannot load {repo_id}: {why}; it is written in vitzoo's layout "
        f'(vitzoo.create("hf-hub:{repo_id}") loads it)'
    )


def push_to_hub(
    model: nn.Module,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str = "Upload vitzoo model",
    token: str | None = None,
    license: str | None = None,
    run: dict[str, Any] | None = None,
) -> str:
    """Write `model`'s repository (write_repo) and upload it as one commit to `repo_id` (created if
    missing, private if asked; `revision` a branch, created from main if missing). Returns the
    commit's URL. Any failure is one HubPushError, and the repository is then unchanged."""
    parse_hub_ref(repo_id)  # "org/name", checked before anything is written or sent
    if "@" in repo_id:
        raise ValueError(f"push_to_hub: repo_id {repo_id!r} is invalid; pass the branch as revision=, not '@'")
    if not commit_message:
        raise ValueError("push_to_hub: commit_message is empty; expected a non-empty message")
    with tempfile.TemporaryDirectory(prefix="vitzoo-push-") as tmp:
        files = write_repo(model, Path(tmp) / "repo", repo_id=repo_id, license=license, run=run)
        if files.why_not_timm is not None:
            logger.warning("%s", not_loadable_line(repo_id, files.why_not_timm))
        return _commit(files, repo_id, private=private, revision=revision, message=commit_message, token=token)


def _commit(
    files: RepoFiles, repo_id: str, *, private: bool, revision: str | None, message: str, token: str | None
) -> str:
    """The one commit: every file of the repository, or nothing."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    where = repo_id + (f"@{revision}" if revision else "")
    step = "create the repository"
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision is not None and revision != "main":
            step = f"create the branch {revision!r}"
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        step = "commit"
        ops = [CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=str(p)) for p in files.files]
        info = api.create_commit(repo_id, ops, commit_message=message, revision=revision)
    except _PUSH_ERRORS as err:
        raise HubPushError(
            f"push to {where} failed at the step '{step}': {_first_line(err)}; nothing was committed, "
            "the repository is unchanged"
        ) from err
    return str(info.commit_url)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


set_hub_pusher(push_to_hub)
