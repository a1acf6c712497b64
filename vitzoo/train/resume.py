"""Resuming a run: before a checkpoint's tensors are loaded, refuse another model, other data or
other settings than the run was started with (unless the changed settings are named as
overrides, which run.json's `settings_history` then records); and `load_run_info` (run.json)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from torch import nn

from ..data import DataSplits
from ..jsonio import JSONFileError, read_json
from .checkpoint import CheckpointError
from .config import RUNTIME_FIELDS, TrainConfig, shaped_by
from .distill import Teacher
from .rundir import RUN_INFO_NAME


def load_run_info(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """A run directory's run.json ({} when there is none); one that cannot be read is a
    CheckpointError naming it."""
    path = Path(out_dir) / RUN_INFO_NAME
    if not path.exists():
        return {}
    try:
        return read_json(path, what="the run record a vitzoo training run writes")
    except JSONFileError as err:
        raise CheckpointError(f"cannot resume {out_dir}: {err}") from err


def _short(value: Any, limit: int = 40) -> str:
    """A setting's value as one would type it after --override (none, true, 0.001)."""
    text = "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _override_flag(key: str, value: Any) -> str:
    """The --override that sets `key` to `value`, quoted for a shell."""
    return "--override " + shlex.quote(f"{key}={_short(value, sys.maxsize)}")


def _refusal(out_dir: Path, refused: dict[str, dict[str, Any]]) -> str:
    """Why a resume with the `refused` changes ({setting: {"old", "new"}}) stops, and what works:
    --override for a setting a run may change, the run's own value for one its checkpoint's
    tensors depend on (SHAPING_FIELDS)."""
    listed = ", ".join(f"{k} {_short(v['old'])} -> {_short(v['new'])}" for k, v in refused.items())
    message = f"cannot resume {out_dir} with changed settings: {listed}. The run was started with the old values"
    shaping = {k: shaped_by(k, v["old"], v["new"]) for k, v in refused.items()}
    fixed = {k: v for k, v in refused.items() if shaping[k]}
    if fixed:
        olds = ", ".join(f"{k}={_short(v['old'], sys.maxsize)}" for k, v in fixed.items())
        held = ", ".join(dict.fromkeys(str(shaping[k]) for k in fixed))
        they = "it shapes" if len(fixed) == 1 else "they shape"
        message += (
            f"; {', '.join(fixed)} cannot change within a run ({they} its checkpoint's {held}): resume with {olds} "
            "as it was started, or start a new run in another directory"
        )
    free = {k: v for k, v in refused.items() if k not in fixed}
    if free:
        flags = " ".join(_override_flag(k, v["new"]) for k, v in free.items())
        message += (
            f"; to change {'the others' if fixed else 'them'} on purpose pass {flags} "
            "(Python: fit(..., overrides={...})), or resume with the old values"
        )
    return message


def check_same_model(
    out_dir: Path, previous: dict[str, Any], model: nn.Module, name: str | None, splits: DataSplits
) -> None:
    """Refuse to resume a run with another model or other classes, from run info the checkpoint
    holds, before any tensor is loaded."""
    stored_name = previous.get("model") or "a model"
    stored = previous.get("model_config")
    model_config = getattr(model, "config", None)
    if stored is not None and model_config is not None:
        # through JSON, as stored: tuples become lists
        current = json.loads(json.dumps(model_config.to_dict()))
        differ = [k for k in sorted(set(stored) | set(current)) if stored.get(k) != current.get(k)]
        if differ:
            shown = differ[:6]
            more = f", and {len(differ) - len(shown)} more" if len(differ) > len(shown) else ""
            old = ", ".join(f"{k}={_short(stored.get(k))}" for k in shown)
            new = ", ".join(f"{k}={_short(current.get(k))}" for k in shown)
            raise CheckpointError(
                f"run directory {out_dir} holds a checkpoint of model {stored_name} ({old}{more}); this run builds "
                f"{name or type(model).__name__} ({new}); resume with the model the run was "
                "started with, or --out another directory"
            )
    stored_streamed = previous.get("streamed")
    if stored_streamed is not None and stored_streamed != splits.streamed:
        how = {True: "streamed from disk (--stream)", False: "decoded into memory (--in-memory)"}
        raise CheckpointError(
            f"run directory {out_dir} was trained on images {how[stored_streamed]} but this data is "
            f"{how[splits.streamed]}; the two prepare training images differently, so the batches would not be "
            f"the run's: resume with the images {how[stored_streamed]}"
        )
    stored_classes = previous.get("classes")
    if stored_classes is not None and list(stored_classes) != list(splits.classes):
        raise CheckpointError(
            f"run directory {out_dir} was trained on classes {_short(stored_classes, 80)} but this data has "
            f"{_short(list(splits.classes), 80)}; resume with the data the run was started with"
        )


def check_same_settings(
    out_dir: Path,
    previous: dict[str, Any],
    config: TrainConfig,
    overrides: dict[str, Any],
    state: dict[str, Any],
    teacher: Teacher | None = None,
) -> dict[str, Any] | None:
    """Compare the settings with those the run was started (or last resumed) with. A change not
    named in `overrides` is an error that lists every change; named ones are returned as the
    settings_history entry (None: nothing changed). The teacher is compared by its weights too:
    the same path may hold another model by now (a retrained run directory, an overwritten file)."""
    stored = previous.get("train_config") or {}
    current = json.loads(json.dumps(dataclasses.asdict(config)))
    changed = {
        k: {"old": stored[k], "new": current[k]}
        for k in current
        if k in stored and k not in RUNTIME_FIELDS and stored[k] != current[k]
    }
    refused = {k: v for k, v in changed.items() if k not in overrides or shaped_by(k, v["old"], v["new"])}
    if refused:
        raise CheckpointError(_refusal(out_dir, refused))
    digest_before = (previous.get("teacher") or {}).get("digest")
    digest_now = teacher.description["digest"] if teacher is not None else None
    if digest_before is not None and digest_now is not None and digest_before != digest_now:
        if not {"teacher", "teacher_weights"} & set(overrides):
            raise CheckpointError(
                f"cannot resume {out_dir}: the teacher {config.teacher!r} is not the model the run started with "
                f"(weights digest {digest_before} -> {digest_now}); resume with the original teacher, or pass "
                f"{_override_flag('teacher', config.teacher)} to continue with this one"
            )
        changed["teacher_digest"] = {"old": digest_before, "new": digest_now}
    if not changed:
        return None
    return {"resumed_at_epoch": state.get("epoch"), "resumed_at_step": state.get("step"), "changed": changed}
