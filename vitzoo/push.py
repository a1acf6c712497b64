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

README.md is the model card (vitzoo/model_card.py). LoRA adapters are merged into the weights,
as `save_pretrained` merges them. Nothing local goes public: every string written into
config.json and the card (the source weights, the run's starting weights and settings, the
description) has its local paths reduced to their last name (`public_value`). The files are
written into a temporary directory and uploaded as one commit (huggingface_hub's
`create_commit`), so a push that fails or is interrupted commits nothing; the error says what the
push did change (a repository or branch it created). Each step of the push (creating the
repository, the branch, the commit with its upload) must finish within VITZOO_PUSH_TIMEOUT seconds
(`push_timeout`), else the push ends with one HubPushError. The token is huggingface_hub's to
find: the `token` argument, else HF_TOKEN, else the cached `hf auth login`; HF_ENDPOINT is honoured.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from . import registry
from .atomic import write_json
from .checks import env_seconds
from .errors import VitzooError
from .layout import CONFIG_NAME, WEIGHTS_NAME, save_pretrained, set_hub_pusher
from .model import ViTConfig, timm_architecture_cfg
from .model_card import CARD_NAME, CardFacts, check_license, layout_summary, loaded_by, model_card
from .pretrained_cfg import PretrainedCfg, pretrained_cfg_of, resolve_label_names
from .weight_shards import DEFAULT_MAX_SHARD_SIZE, index_name, parse_shard_size, write_weights
from .weights.exporter import timm_state_dict
from .weights.hub import NETWORK_ERRORS, parse_hub_ref
from .weights.timm_files import TIMM_MODEL_ARGS

logger = logging.getLogger("vitzoo.push")

TIMM_LAYOUT, VITZOO_LAYOUT = "timm", "vitzoo"
# Fields that change training only (dropout, stochastic depth): timm builds its model without them.
_TRAINING_ONLY = ("drop_rate", "attn_drop_rate", "drop_path_rate")
# ViTConfig fields that timm's VisionTransformer takes under the same name (timm_files reads them back).
_TIMM_ARGS = (*TIMM_MODEL_ARGS, "dynamic_img_size")


PUSH_TIMEOUT_ENV = "VITZOO_PUSH_TIMEOUT"
# Seconds each step of a push may take (docs/hub.md): the commit's step includes the upload of the
# weights, so it is generous; a Hub that does not answer at all costs this long once.
DEFAULT_PUSH_TIMEOUT_S = 600.0
# Keys whose strings are data, not places: label and class names are kept as they are.
_DATA_KEYS = frozenset({"label_names", "classes"})


class HubPushError(VitzooError, OSError):
    """The Hub refused a push, could not be reached or did not answer in time; nothing was
    committed, and the message says what the push changed before it failed."""


# What huggingface_hub raises when the Hub refuses or cannot be reached (HTTP errors are OSErrors),
# and ValueError for what it refuses before sending (no token for a write, a malformed answer).
_PUSH_ERRORS: tuple[type[BaseException], ...] = (*NETWORK_ERRORS, ValueError)


@dataclass(frozen=True)
class RepoFiles:
    """What `write_repo` wrote: the layout, timm's architecture and model_args (timm layout), or
    why timm and transformers cannot load it (vitzoo layout), and whether the weights are shards."""

    directory: Path
    layout: str
    timm_name: str | None
    model_args: dict[str, Any]
    why_not_timm: str | None
    sharded: bool = False

    @property
    def files(self) -> list[Path]:
        return sorted(p for p in self.directory.iterdir() if p.is_file())

    @property
    def loaded_by(self) -> tuple[str, ...]:
        """The libraries that load the repository (model_card.loaded_by)."""
        return loaded_by(self.layout, self.sharded)

    @property
    def summary(self) -> str:
        """The layout and who loads it, in one line (the card's and `vitzoo push`'s)."""
        return layout_summary(self.layout, self.sharded, self.why_not_timm)


class PushInfo(str):
    """What push_to_hub returns: the commit's URL (a str, as huggingface_hub's CommitInfo is), and
    in `repo` what the repository holds (its layout, whether sharded, who loads it; its local
    files are gone)."""

    repo: RepoFiles

    def __new__(cls, url: str, repo: RepoFiles) -> PushInfo:
        info = super().__new__(cls, url)
        info.repo = repo
        return info

    def __getnewargs__(self) -> tuple[str, RepoFiles]:  # type: ignore[override]  # copy and pickle
        return str(self), self.repo


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
    parse_shard_size(max_shard_size)
    directory = Path(directory)
    pcfg = pretrained_cfg_of(model) or PretrainedCfg()
    if license is not None:
        pcfg = pcfg.replace(license=check_license(license, "push_to_hub: license="))
    else:
        check_license(pcfg.license, "push_to_hub: the model's pretrained_cfg.license (from its config.json)")
    pcfg = PretrainedCfg(**public_value(pcfg.to_dict()))
    run = public_value(run)
    counterpart = timm_counterpart(model)
    if isinstance(counterpart, str):
        model_args: dict[str, Any] = {}
        layout, timm_name, why_not = VITZOO_LAYOUT, None, counterpart
        save_pretrained(model, directory, max_shard_size=max_shard_size)  # LoRA merged, as in every saved model
        _restate_config(directory / CONFIG_NAME, pcfg.license)
    else:
        (timm_name, model_args), layout, why_not = counterpart, TIMM_LAYOUT, None
        directory.mkdir(parents=True, exist_ok=True)
        # LoRA merged, as save_pretrained does
        state = timm_state_dict(model)
        write_weights(directory, state, name=WEIGHTS_NAME, max_shard_size=max_shard_size, metadata={"format": "pt"})
        write_json(directory / CONFIG_NAME, public_value(timm_hub_config(model, timm_name, model_args, pcfg)))
    sharded = (directory / index_name(WEIGHTS_NAME)).is_file()
    files = RepoFiles(directory, layout, timm_name, model_args, why_not, sharded)
    facts = CardFacts(repo_id, layout, timm_name, model_args, why_not, pcfg, run, sharded)
    (directory / CARD_NAME).write_text(model_card(model, facts), encoding="utf-8")
    return files


def _restate_config(path: Path, license: str | None) -> None:
    """vitzoo's config.json as pushed: the licence the push states (save_pretrained writes the
    model's), every string public."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data.setdefault("pretrained_cfg", {})["license"] = license
    write_json(path, public_value(data))


# A local path inside a string: absolute (POSIX, a Windows drive, UNC), home- or dot-relative, or a
# file: URL, starting the string or after a space, quote, bracket, '=', ',' or ';'. The path of an
# http(s) URL and a Hub id ("org/name", "hf-hub:org/name") do not start that way.
_LOCAL_PATH = re.compile(
    r"""(?:^|(?<=[\s'"`(\[{<=,;]))(?:file:)?"""
    r"""(?:~[\w.-]*[/\\]|\.{1,2}[/\\]|/|[A-Za-z]:[/\\]|\\\\)[^\s'"`()\[\]{}<>,;|]+"""
)


def public_value(value: Any, key: str | None = None) -> Any:
    """`value` (JSON-like data) with every local path in its strings replaced by the path's last
    name ("/home/me/runs/a/best" -> "best"), and a whole string naming an existing local file or
    directory likewise; hub ids, registered names and URLs stay. The strings under `_DATA_KEYS`
    (label and class names) are data and stay as they are."""
    if key in _DATA_KEYS:
        return value
    if isinstance(value, dict):
        return {k: public_value(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(public_value(v) for v in value)
    if not isinstance(value, str):
        return value
    text = _LOCAL_PATH.sub(lambda m: _last_name(m.group(0)), value)
    if text == value and ("/" in text or os.sep in text) and not re.search(r"\s|^[\w-]+:", text):
        try:
            exists = Path(text).exists()
        except (OSError, ValueError):
            exists = False
        text = _last_name(text) if exists else text
    return text


def _last_name(path: str) -> str:
    return re.split(r"[/\\]", path.removeprefix("file:").rstrip("/\\"))[-1]


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
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
) -> PushInfo:
    """Write `model`'s repository (write_repo; weights above `max_shard_size` as shards and their
    index) and upload it as one commit to `repo_id` (created if
    missing, private if asked; `revision` a branch, created from main if missing). Returns the
    commit's URL (a PushInfo: its `repo` says what the repository holds). Any failure is one
    HubPushError: nothing was committed, and the message says whether the push created the
    repository or the branch before it failed."""
    parse_hub_ref(repo_id)  # "org/name", checked before anything is written or sent
    if "@" in repo_id:
        raise ValueError(f"push_to_hub: repo_id {repo_id!r} is invalid; pass the branch as revision=, not '@'")
    if not commit_message:
        raise ValueError("push_to_hub: commit_message is empty; expected a non-empty message")
    timeout = push_timeout()
    with tempfile.TemporaryDirectory(prefix="vitzoo-push-") as tmp:
        files = write_repo(
            model, Path(tmp) / "repo", repo_id=repo_id, license=license, run=run, max_shard_size=max_shard_size
        )
        if files.why_not_timm is not None:
            logger.warning("%s", not_loadable_line(repo_id, files.why_not_timm))
        push = _Push(repo_id, revision, timeout)
        url = push.run(lambda: _commit(files, push, private=private, message=commit_message, token=token))
    return PushInfo(url, files)


def push_timeout() -> float | None:
    """Seconds each step of a push may take (VITZOO_PUSH_TIMEOUT, default DEFAULT_PUSH_TIMEOUT_S);
    None waits for ever ("inf")."""
    return env_seconds(PUSH_TIMEOUT_ENV, DEFAULT_PUSH_TIMEOUT_S, "that each step of a push to the Hub may take")


@dataclass(eq=False)
class _Push:
    """One push under way: its step, what it has created so far, and its outcome. The Hub's
    requests run in a worker thread (huggingface_hub sets no timeout on them), watched here."""

    repo_id: str
    revision: str | None
    timeout: float | None
    step: str = "create the repository"
    created: list[str] = field(default_factory=list)  # "the repository org/name", "the branch 'dev'"
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)

    @property
    def where(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")

    def enter(self, step: str) -> None:
        with self.cond:
            self.step = step
            self.cond.notify_all()

    def run(self, work: Callable[[], str]) -> str:
        """`work()` in a daemon thread, each step within the timeout; one HubPushError otherwise."""

        def target() -> None:
            try:
                self.result = work()
            except BaseException as err:  # handed to the caller's thread
                self.error = err
            with self.cond:
                self.done = True
                self.cond.notify_all()

        threading.Thread(target=target, name="vitzoo-push", daemon=True).start()
        with self.cond:
            while not self.done:
                step = self.step
                if not self.cond.wait_for(functools.partial(self.moved_on, step), self.timeout):
                    raise HubPushError(
                        f"push to {self.where} failed at the step '{step}': the Hub did not answer within "
                        f"{self.timeout:g} s ({PUSH_TIMEOUT_ENV} sets it); {self.changes(timed_out=True)}"
                    )
        if isinstance(self.error, _PUSH_ERRORS):
            raise HubPushError(
                f"push to {self.where} failed at the step '{self.step}': {_first_line(self.error)}; {self.changes()}"
            ) from self.error
        if self.error is not None:
            raise self.error
        return str(self.result)

    def moved_on(self, step: str) -> bool:
        return self.done or self.step != step

    def changes(self, *, timed_out: bool = False) -> str:
        """What the push changed before it failed, in words."""
        landing = timed_out and self.step == "commit"
        if landing:
            said = "the commit was abandoned unanswered and may still land: look at the repository"
        elif timed_out:
            said = f"nothing was committed, and whether this step changed {self.repo_id} is unknown"
        else:
            said = "nothing was committed"
        if self.created:
            files = "" if landing else ", without the model's files"
            return f"{said}; this push created {' and '.join(self.created)}{files}"
        return said if timed_out else f"{said}, the repository is unchanged"


def _commit(files: RepoFiles, push: _Push, *, private: bool, message: str, token: str | None) -> str:
    """The one commit: every file of the repository, or nothing. Runs in `push`'s worker thread."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    if _create(lambda ok: api.create_repo(push.repo_id, private=private, exist_ok=ok)):
        push.created.append(f"the repository {push.repo_id}")
    revision = push.revision
    if revision is not None and revision != "main":
        push.enter(f"create the branch {revision!r}")
        if _create(lambda ok: api.create_branch(push.repo_id, branch=revision, exist_ok=ok)):
            push.created.append(f"the branch {revision!r}")
    push.enter("commit")
    ops = [CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=str(p)) for p in files.files]
    return str(api.create_commit(push.repo_id, ops, commit_message=message, revision=revision).commit_url)


def _create(create: Callable[[bool], Any]) -> bool:
    """Whether `create(exist_ok)` made something new: asked with exist_ok=False, the Hub answers 409
    for what exists. Refused otherwise (401-403: no right to create, yet it may exist), it is asked
    again with exist_ok=True, which huggingface_hub resolves by looking."""
    from huggingface_hub.utils import HfHubHTTPError

    try:
        create(False)
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status not in (401, 402, 403, 409):
            raise
        if status != 409:
            create(True)
        return False
    return True


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


set_hub_pusher(push_to_hub)
