"""Uploading a model to the Hugging Face Hub as one commit, in vitzoo's layout: what
`model.push_to_hub(...)` does for any VisionTransformer. A model that vitzoo.create or
from_pretrained made carries the writer of the layout that loads in the most places (timm's,
where timm has the architecture: vitzoo/push.py's `write_repo`, which needs the registry), handed
to it by the builder (`attach_repo_writer`); any other model is written in vitzoo's layout.

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

import dataclasses
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

from .atomic import write_json
from .checks import env_seconds
from .errors import VitzooError
from .hub_refs import NETWORK_ERRORS, parse_hub_ref
from .layout import CONFIG_NAME, WEIGHTS_NAME, save_pretrained
from .model_card import CARD_NAME, CardFacts, check_license, layout_summary, loaded_by, model_card
from .pretrained_cfg import PretrainedCfg, pretrained_cfg_of
from .weight_shards import DEFAULT_MAX_SHARD_SIZE, index_name, parse_shard_size

logger = logging.getLogger("vitzoo.push")

TIMM_LAYOUT, VITZOO_LAYOUT = "timm", "vitzoo"
# Why a model that no builder handed a writer is written in vitzoo's layout.
NO_ARCHITECTURE = "the model names no registered architecture (it was not made by vitzoo.create or from_pretrained)"
_REPO_WRITER = "repo_writer"  # the model attribute holding its writer (attach_repo_writer)

PUSH_TIMEOUT_ENV = "VITZOO_PUSH_TIMEOUT"
# Seconds each step of a push may take (docs/hub.md): the commit's step includes the upload of the
# weights, so it is generous; a Hub that does not answer at all costs this long once.
DEFAULT_PUSH_TIMEOUT_S = 600.0
# Keys whose strings are data, not places: label and class names are kept as they are.
_DATA_KEYS = frozenset({"label_names", "classes"})


# What huggingface_hub raises when the Hub refuses or cannot be reached (HTTP errors are OSErrors),
# and ValueError for what it refuses before sending (no token for a write, a malformed answer).
_PUSH_ERRORS: tuple[type[BaseException], ...] = (*NETWORK_ERRORS, ValueError)


class HubPushError(VitzooError, OSError):
    """The Hub refused a push, could not be reached or did not answer in time; nothing was
    committed, and the message says what the push changed before it failed."""


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


# Writes a model's repository into a directory, called as `write_vitzoo_repo` is (model, directory,
# *, repo_id, license, run, max_shard_size): that function, or push.py's `write_repo`.
RepoWriter = Callable[..., RepoFiles]


def attach_repo_writer(model: object, writer: RepoWriter) -> None:
    """Hand `model` the writer of its repository (the builder hands push.py's `write_repo`, which
    knows the model's registered architecture); `push_to_hub` uses it. A plain attribute, as
    `layout.attach_architecture` sets one."""
    setattr(model, _REPO_WRITER, writer)


def public_pretrained_cfg(model: nn.Module, license: str | None) -> PretrainedCfg:
    """The model's pretrained cfg as pushed: `license` replaces the licence it states; either must
    be a licence id (`check_license`); every string public."""
    pcfg = pretrained_cfg_of(model) or PretrainedCfg()
    if license is not None:
        pcfg = pcfg.replace(license=check_license(license, "push_to_hub: license="))
    else:
        check_license(pcfg.license, "push_to_hub: the model's pretrained_cfg.license (from its config.json)")
    return PretrainedCfg(**public_value(pcfg.to_dict()))


def finish_repo(model: nn.Module, directory: Path, facts: CardFacts) -> RepoFiles:
    """What a writer wrote into `directory` (whether its weights are shards), with README.md, the
    model card, written beside it."""
    sharded = (directory / index_name(WEIGHTS_NAME)).is_file()
    facts = dataclasses.replace(facts, sharded=sharded)
    (directory / CARD_NAME).write_text(model_card(model, facts), encoding="utf-8")
    return RepoFiles(directory, facts.layout, facts.timm_name, facts.model_args, facts.why_not_timm, sharded)


def write_vitzoo_repo(
    model: nn.Module,
    directory: str | os.PathLike[str],
    *,
    repo_id: str,
    license: str | None = None,
    run: dict[str, Any] | None = None,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    why_not_timm: str = NO_ARCHITECTURE,
) -> RepoFiles:
    """Write the repository's files into `directory` in vitzoo's layout (`save_pretrained`, LoRA
    merged; above `max_shard_size` as shards and their index) with README.md, which says why timm
    and transformers cannot load it. `license` as in `public_pretrained_cfg`."""
    parse_shard_size(max_shard_size)
    directory = Path(directory)
    pcfg = public_pretrained_cfg(model, license)
    save_pretrained(model, directory, max_shard_size=max_shard_size)
    _restate_config(directory / CONFIG_NAME, pcfg.license)
    facts = CardFacts(repo_id, VITZOO_LAYOUT, None, {}, why_not_timm, pcfg, public_value(run))
    return finish_repo(model, directory, facts)


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
    writer: RepoWriter | None = None,
) -> PushInfo:
    """Write `model`'s repository (with `writer`, else the one the builder handed the model, else
    `write_vitzoo_repo`; weights above `max_shard_size` as shards and their index) and upload it as
    one commit to `repo_id` (created if missing, private if asked; `revision` a branch, created
    from main if missing). Returns the commit's URL (a PushInfo: its `repo` says what the
    repository holds). Any failure is one HubPushError: nothing was committed, and the message
    says whether the push created the repository or the branch before it failed."""
    parse_hub_ref(repo_id)  # "org/name", checked before anything is written or sent
    if "@" in repo_id:
        raise ValueError(f"push_to_hub: repo_id {repo_id!r} is invalid; pass the branch as revision=, not '@'")
    if not commit_message:
        raise ValueError("push_to_hub: commit_message is empty; expected a non-empty message")
    write: RepoWriter = writer or getattr(model, _REPO_WRITER, None) or write_vitzoo_repo
    timeout = push_timeout()
    with tempfile.TemporaryDirectory(prefix="vitzoo-push-") as tmp:
        files = write(
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
