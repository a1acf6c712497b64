"""Sharded training checkpoints (FSDP runs): `torch.distributed.checkpoint` (DCP) writes each
rank's slices of the weights, the weight average and the optimizer state into one directory,
with no process gathering the whole model:

    checkpoint.dcp/latest.json          {"dir": "step-<global step>-<token>"}: the complete one
    checkpoint.dcp/step-.../            DCP's files (one per rank, .metadata) and vitzoo.json,
                                        the state, schedule and run info (checkpoint.py's metadata)

A save goes into a new step directory; only once it is complete does `latest.json` (written
atomically) point at it, and then the older ones are removed: `--resume` after a crash sees
the previous complete checkpoint or the new one. DCP stores tensors by name, not by rank, so a
checkpoint loads into any number of processes, and into a DDP run (whole tensors per rank);
an FSDP run also resumes from a DDP run's checkpoint.safetensors. A run directory holds one
checkpoint: saving one kind removes the other.
"""

from __future__ import annotations

import os
import secrets
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..atomic import write_json
from ..jsonio import JSONFileError, read_json
from . import dcp_read
from .checkpoint import (
    CHECKPOINT_NAME,
    CheckpointError,
    TrainState,
    check_same_ema,
    checkpoint_meta,
    optimizer_state,
    read_tensors,
)
from .ema import WeightEma

SHARDED_NAME = "checkpoint.dcp"
LATEST_NAME = "latest.json"
META_NAME = "vitzoo.json"


def find_checkpoint(out_dir: Path) -> Path | None:
    """The run directory's checkpoint: checkpoint.safetensors or the step directory
    checkpoint.dcp/latest.json names (the newer, if a crash left both); None when neither."""
    single = out_dir / CHECKPOINT_NAME
    latest = out_dir / SHARDED_NAME / LATEST_NAME
    sharded: Path | None = None
    if latest.is_file():
        try:
            name = read_json(latest, what="the pointer to a sharded checkpoint").get("dir")
        except JSONFileError as err:
            raise CheckpointError(f"cannot resume {out_dir}: {err}") from err
        if not isinstance(name, str) or "/" in name or not (latest.parent / name / META_NAME).is_file():
            raise CheckpointError(f"{latest} names no complete checkpoint ({name!r}); expected a step directory")
        sharded = latest.parent / name
    if sharded is None or (single.is_file() and single.stat().st_mtime > latest.stat().st_mtime):
        return single if single.is_file() else None
    return sharded


def has_checkpoint(out_dir: Path) -> bool:
    return (out_dir / CHECKPOINT_NAME).exists() or (out_dir / SHARDED_NAME / LATEST_NAME).exists()


def is_sharded(path: Path) -> bool:
    return path.is_dir()


def read_meta(path: Path) -> dict[str, Any]:
    """The metadata of a checkpoint `find_checkpoint` returned, of either kind."""
    if not is_sharded(path):
        from .checkpoint import read_checkpoint_meta

        return read_checkpoint_meta(path)
    try:
        meta = read_json(path / META_NAME, what="a vitzoo sharded checkpoint's state")
    except JSONFileError as err:
        raise CheckpointError(f"cannot resume from {path}: {err}") from err
    return checkpoint_meta(meta, where=str(path / META_NAME))


def _state(model: nn.Module, optimizer: torch.optim.Optimizer, ema: WeightEma | None) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    state: dict[str, Any] = {
        "model": get_model_state_dict(model),
        "optim": get_optimizer_state_dict(model, optimizer),
        "rng": torch.get_rng_state(),
    }
    if ema is not None:
        state["ema"] = get_model_state_dict(ema.module)
    return state


def save_sharded(
    out_dir: Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainState,
    run_info: dict[str, Any],
    ema: WeightEma | None = None,
) -> Path:
    """Write the sharded checkpoint (every rank calls it) and make it the run's; returns its
    step directory."""
    import torch.distributed.checkpoint as dcp

    root = out_dir / SHARDED_NAME
    token = [secrets.token_hex(4) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(token, src=0)
    step_dir = root / f"step-{state.global_step}-{token[0]}"
    dcp.save(_state(model, optimizer, ema), checkpoint_id=str(step_dir))
    error: BaseException | None = None
    if dist.get_rank() == 0:
        try:
            _finish_save(out_dir, step_dir, optimizer, scheduler, state, run_info)
        except BaseException as err:  # the others learn of it below instead of waiting
            error = err
    failed = torch.tensor([0.0 if error is None else 1.0])
    dist.all_reduce(failed)
    if error is not None:
        raise error
    if failed.item():
        raise CheckpointError(f"rank 0 could not complete the checkpoint {step_dir} (its error message says why)")
    return step_dir


def _finish_save(
    out_dir: Path,
    step_dir: Path,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainState,
    run_info: dict[str, Any],
) -> None:
    """Rank 0, once every rank wrote its part: vitzoo.json, then latest.json (the checkpoint is
    now the run's), then the older ones go."""
    root = out_dir / SHARDED_NAME
    opt_groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.state_dict()["param_groups"]]
    meta = {
        "format": 1,
        "state": state.__dict__,
        "scheduler": scheduler.state_dict(),
        "param_groups": opt_groups,
        "optimizer_scalars": {},
        "run": run_info,
    }
    write_json(step_dir / META_NAME, meta)
    write_json(root / LATEST_NAME, {"dir": step_dir.name})
    remove_stale(out_dir, keep=step_dir)
    (out_dir / CHECKPOINT_NAME).unlink(missing_ok=True)


def remove_stale(out_dir: Path, keep: Path | None = None) -> list[Path]:
    """Delete step directories of checkpoint.dcp that are not `keep` (or, without it, not the one
    latest.json names): older checkpoints and saves a crash interrupted. Under the run's lock."""
    root = out_dir / SHARDED_NAME
    if not root.is_dir():
        return []
    if keep is None:
        current = find_checkpoint(out_dir)
        keep = current if current is not None and is_sharded(current) else None
    removed = [p for p in root.iterdir() if p.is_dir() and p != keep]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def remove_sharded(out_dir: Path) -> None:
    """After a checkpoint.safetensors was written: the sharded one is the older, remove it."""
    shutil.rmtree(out_dir / SHARDED_NAME, ignore_errors=True)


def load_sharded(
    path: Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    ema: WeightEma | None = None,
) -> TrainState:
    """Restore a sharded checkpoint into `model` (sharded or not, any number of processes)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    meta = read_meta(path)
    saved_ema = bool((meta.get("run") or {}).get("train_config", {}).get("ema_decay"))
    check_same_ema(path, saved=saved_ema, ema=ema)
    index = dcp_read.read_index(path)
    state = _state(model, optimizer, ema)
    with warnings.catch_warnings():  # one process reading whole tensors is what we mean
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp_read.load(state, path, index)
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optim"])
    if ema is not None:
        set_model_state_dict(ema.module, state["ema"])
    torch.set_rng_state(state["rng"])
    scheduler.load_state_dict(meta["scheduler"])
    return TrainState.from_dict(meta["state"])


def load_full_into_sharded(
    path: Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    ema: WeightEma | None = None,
) -> TrainState:
    """Restore a DDP run's checkpoint.safetensors into a sharded model: each rank reads the file
    and keeps its slices (optimizer state by parameter name)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    meta = read_meta(path)
    tensors = read_tensors(path)
    full = StateDictOptions(full_state_dict=True)
    model_state: dict[str, Any] = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    ema_state: dict[str, Any] = {k[len("ema.") :]: v for k, v in tensors.items() if k.startswith("ema.")}
    check_same_ema(path, saved=bool(ema_state), ema=ema)
    names = {id(p): n for n, p in model.named_parameters()}
    order = [names[id(p)] for g in optimizer.param_groups for p in g["params"]]
    by_index = optimizer_state(tensors, meta)
    if max(by_index, default=-1) >= len(order) or len(meta["param_groups"]) != len(optimizer.param_groups):
        raise CheckpointError(
            f"checkpoint {path} was written with different optimizer parameter groups; resume with the original settings"
        )
    groups = [{**g, "params": [order[i] for i in g["params"]]} for g in meta["param_groups"]]
    optim_state: dict[str, Any] = {
        "state": {order[i]: values for i, values in by_index.items()},
        "param_groups": groups,
    }
    try:
        set_model_state_dict(model, model_state, options=full)
        set_optimizer_state_dict(model, optimizer, optim_state, options=full)
        if ema is not None:
            set_model_state_dict(ema.module, ema_state, options=full)
    except (KeyError, RuntimeError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path} does not fit this run: {dcp_read.first_line(err)}") from err
    scheduler.load_state_dict(meta["scheduler"])
    torch.set_rng_state(tensors["rng.torch"])
    return TrainState.from_dict(meta["state"])


def checkpoint_label(out_dir: Path) -> str:
    """The checkpoint's path as messages name it."""
    path = find_checkpoint(out_dir)
    return os.fspath(path if path is not None else out_dir / CHECKPOINT_NAME)
