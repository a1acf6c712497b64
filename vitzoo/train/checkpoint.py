"""Training checkpoints: ONE safetensors file holding everything needed to resume.

    model.<key>                       the model's state dict
    ema.<key>                         the weight average's state dict (runs with an EMA only)
    optimizer.<param index>.<name>    optimizer state tensors (AdamW: exp_avg, exp_avg_sq, step)
    rng.torch / rng.cuda              the global RNG states (dropout, stochastic depth)
    metadata["vitzoo.train"]          JSON: epoch, step, optimizer hyper-parameters, schedule,
                                      partial epoch sums, best accuracy, the run's settings

One file written with an atomic rename means a reader (or a `--resume` after `kill -9`) sees
either the previous complete checkpoint or the new complete one, never a mix of the two. Nothing
is unpickled on load: safetensors is data only, the rest is JSON.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..atomic import write_safetensors
from ..errors import VitzooError
from ..jsonio import JSONFileError, parse_json, to_json
from .ema import WeightEma
from .optim import WarmupCosine

CHECKPOINT_NAME = "checkpoint.safetensors"
_META_KEY = "vitzoo.train"
# The parts of the metadata that resuming reads.
_META_FIELDS = {"state": dict, "scheduler": dict, "param_groups": list, "optimizer_scalars": dict, "run": dict}


class CheckpointError(VitzooError, ValueError):
    """A checkpoint that cannot be resumed from; the message names the file and the reason."""


@dataclass
class TrainState:
    """Where a run is: the next (epoch, step) to run, running sums of the current epoch, best so far."""

    epoch: int = 0
    step: int = 0  # next step inside `epoch`
    global_step: int = 0
    epoch_loss_sum: float = 0.0
    epoch_correct: int = 0
    epoch_seen: int = 0
    epoch_time: float = 0.0
    epoch_distill_loss_sum: float = 0.0  # the teacher's term of epoch_loss_sum (runs with a teacher)
    best_acc: float = -1.0
    best_epoch: int = -1

    def add_step(self, *, loss: float, distill_loss: float | None, correct: int, seen: int) -> None:
        """Count one optimizer step and add its batch (`seen` images) to the epoch's sums."""
        self.step += 1
        self.global_step += 1
        self.epoch_loss_sum += loss * seen
        if distill_loss is not None:
            self.epoch_distill_loss_sum += distill_loss * seen
        self.epoch_correct += correct
        self.epoch_seen += seen

    def start_next_epoch(self) -> None:
        """Step 0 of the next epoch, its sums empty."""
        self.epoch, self.step = self.epoch + 1, 0
        self.epoch_loss_sum, self.epoch_correct, self.epoch_seen, self.epoch_time = 0.0, 0, 0, 0.0
        self.epoch_distill_loss_sum = 0.0

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainState:
        """The state a checkpoint stored. Checkpoints written before the distillation sum was a
        field kept it in `extra`: it is read from there, so they resume as they were."""
        return cls(**_state_fields(values))


def _state_fields(values: dict[str, Any]) -> dict[str, Any]:
    """A stored state's fields, the distillation sum of an older checkpoint's `extra` among them."""
    values = dict(values)
    extra = values.pop("extra", None) or {}
    if not isinstance(extra, dict):
        raise CheckpointError(f"state.extra is {extra!r}; expected an object")
    if "epoch_distill_loss_sum" in extra:
        values.setdefault("epoch_distill_loss_sum", extra["epoch_distill_loss_sum"])
    return values


def save_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainState,
    run_info: dict[str, Any],
    ema: WeightEma | None = None,
) -> Path:
    tensors: dict[str, torch.Tensor] = {f"model.{k}": v for k, v in model.state_dict().items()}
    if ema is not None:
        tensors.update({f"ema.{k}": v for k, v in ema.state_dict().items()})
    opt = optimizer.state_dict()
    per_param_scalars: dict[str, dict[str, Any]] = {}
    for index, values in opt["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{name}"] = value
            else:
                per_param_scalars.setdefault(str(index), {})[name] = value
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    meta = {
        "format": 1,
        "state": state.__dict__,
        "scheduler": scheduler.state_dict(),
        "param_groups": opt["param_groups"],
        "optimizer_scalars": per_param_scalars,
        "run": run_info,
    }
    return write_safetensors(path, tensors, metadata={_META_KEY: to_json(meta)})


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise CheckpointError(
            f"no checkpoint at {path}; nothing to resume (expected {CHECKPOINT_NAME} in the run directory)"
        )


def read_checkpoint_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checkpoint's JSON metadata (state, schedule, the run's settings); reads only the header."""
    from safetensors import safe_open

    path = Path(path)
    _require_file(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get(_META_KEY)
    except Exception as err:  # safetensors raises its own error types for bad headers
        raise CheckpointError(f"cannot read checkpoint {path}: {err}") from err
    if raw is None:
        raise CheckpointError(
            f"{path} is a safetensors file but not a vitzoo training checkpoint (no '{_META_KEY}' metadata)"
        )
    try:
        meta = parse_json(
            raw, where=f"{path} (its {_META_KEY!r} metadata)", what="a vitzoo training checkpoint's state"
        )
    except JSONFileError as err:
        raise CheckpointError(f"cannot resume from {path}: {err}") from err
    return checkpoint_meta(meta, where=f"{path}: its {_META_KEY!r} metadata")


def checkpoint_meta(meta: dict[str, Any], *, where: str) -> dict[str, Any]:
    """`meta` if it has the parts resuming reads; `where` names it in the error."""
    missing = [k for k, kind in _META_FIELDS.items() if not isinstance(meta.get(k), kind)]
    if missing:
        raise CheckpointError(
            f"cannot resume from {where}: it lacks {', '.join(missing)} (param_groups a list, the others objects); "
            "expected the checkpoint a vitzoo training run writes"
        )
    problem = _meta_problem(meta)
    if problem is not None:
        raise CheckpointError(f"cannot resume from {where}: {problem} (in the checkpoint a vitzoo training run writes)")
    return meta


def _meta_problem(meta: dict[str, Any]) -> str | None:
    """What makes the parts resuming reads unusable (the key and its value), or None."""
    problem = _state_problem(meta["state"])
    if problem is not None:
        return problem
    problem = WarmupCosine.state_problem(meta["scheduler"])
    if problem is not None:
        return f"scheduler.{problem}"
    for i, group in enumerate(meta["param_groups"]):
        if not isinstance(group, dict):
            return f"param_groups[{i}] is {group!r}; expected an object"
    for index, scalars in meta["optimizer_scalars"].items():
        if not index.isdigit() or not isinstance(scalars, dict):
            return f"optimizer_scalars.{index} is {scalars!r}; expected an object under a parameter's number"
    for key in ("train_config", "model_config"):
        if not isinstance(meta["run"].get(key, {}), dict):
            return f"run.{key} is {meta['run'][key]!r}; expected an object"
    return None


def _state_problem(state: dict[str, Any]) -> str | None:
    """What makes `state` not a TrainState's fields (counts whole numbers, sums numbers), or None."""
    kinds = {f.name: f.type for f in fields(TrainState)}
    try:
        values = _state_fields(state)
    except CheckpointError as err:
        return str(err)
    for key, value in values.items():
        if key not in kinds:
            return f"state.{key} is not part of a run's state ({', '.join(kinds)})"
        number = isinstance(value, int | float) and not isinstance(value, bool)
        least = -1 if key == "best_epoch" else 0
        if kinds[key] == "int" and (not isinstance(value, int) or isinstance(value, bool) or value < least):
            return f"state.{key} is {value!r}; expected a whole number >= {least}"
        if not number:
            return f"state.{key} is {value!r}; expected a number"
    return None


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint file (a damaged one is a CheckpointError naming it)."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as err:  # safetensors raises its own error types
        raise CheckpointError(f"cannot read checkpoint {path}: {err}") from err


def optimizer_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The optimizer state by parameter index, from a checkpoint's tensors and metadata."""
    opt_state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            opt_state.setdefault(int(index), {})[name] = value
    for index, scalars in meta["optimizer_scalars"].items():
        opt_state.setdefault(int(index), {}).update(scalars)
    return opt_state


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    ema: WeightEma | None = None,
) -> tuple[TrainState, dict[str, Any]]:
    """Restore model, optimizer, scheduler, weight average and RNG from `path`; returns the
    TrainState and run info."""
    path = Path(path)
    meta = read_checkpoint_meta(path)
    tensors = read_tensors(path)
    model_state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    _check_shapes(path, model, model_state, what="the model")
    missing, unexpected = model.load_state_dict(model_state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {path} does not fit this model: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}; "
            "resume with the same model and settings the run was started with"
        )
    ema_state = {k[len("ema.") :]: v for k, v in tensors.items() if k.startswith("ema.")}
    check_same_ema(path, saved=bool(ema_state), ema=ema)
    if ema is not None:
        _check_shapes(path, ema.module, ema_state, what="the weight average")
        missing, unexpected = ema.module.load_state_dict(ema_state, strict=False)
        if missing or unexpected:
            raise CheckpointError(
                f"checkpoint {path}: the weight average does not fit this model: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
    opt_state = optimizer_state(tensors, meta)
    groups = meta["param_groups"]
    if len(groups) != len(optimizer.param_groups) or any(
        len(g["params"]) != len(h["params"]) for g, h in zip(groups, optimizer.param_groups, strict=True)
    ):
        raise CheckpointError(
            f"checkpoint {path} was written with different optimizer parameter groups "
            "(linear probe / layer decay settings changed?); resume with the original settings"
        )
    optimizer.load_state_dict({"state": opt_state, "param_groups": groups})
    scheduler.load_state_dict(meta["scheduler"])
    torch.set_rng_state(tensors["rng.torch"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    return TrainState.from_dict(meta["state"]), meta["run"]


def check_same_ema(path: Path, *, saved: bool, ema: WeightEma | None) -> None:
    """Refuse a checkpoint written with (`saved`) or without a weight average into a run without
    or with one."""
    if saved != (ema is not None):
        raise CheckpointError(
            f"checkpoint {path} was written {'with' if saved else 'without'} a weight average (EMA) but this run "
            f"is {'without' if ema is None else 'with'} one; resume with the EMA setting the run was started with"
        )


def _check_shapes(path: Path, model: nn.Module, state: dict[str, torch.Tensor], *, what: str) -> None:
    """Refuse tensors whose shapes differ from the model's with a short message; load_state_dict
    would list every mismatch in one line thousands of characters long."""
    own = model.state_dict()
    bad = [k for k, v in state.items() if k in own and tuple(own[k].shape) != tuple(v.shape)]
    if bad:
        first = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise CheckpointError(
            f"checkpoint {path} does not fit {what}: {first} is {tuple(state[first].shape)} in the checkpoint but "
            f"{tuple(own[first].shape)} in this model{more}; resume with the model the run was started with"
        )
