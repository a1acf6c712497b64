"""The choice cache: what a choice depends on (`cache_key`), reading a remembered choice back
checked, recording one under a file lock (other processes record theirs too)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol

import filelock
import torch
from torch import nn

from ..atomic import write_json
from ..checks import Range
from ..jsonio import read_json
from ..machine_cache import cache_dir
from .machine import device_name, version_of
from .outputs import model_dtype

CACHE_VERSION = 1


# How long recording a choice waits for another process recording its own.
CACHE_LOCK_WAIT_S = 10.0


def cache_file() -> Path:
    """Where choices are remembered: $VITZOO_CACHE/optimize.json, else ~/.cache/vitzoo/optimize.json."""
    return cache_dir() / "optimize.json"


def cache_key(
    model: nn.Module, x: torch.Tensor, fp8: bool, *, method: str, kind: str, extra: dict[str, Any] | None = None
) -> str:
    """What the choice depends on: the model's architecture (`kind`: its class) and dtype, the
    `method` run, the input, the machine and the versions of everything that runs it; `extra`:
    what else the caller asked (int8: the calibration set, the bounds)."""
    config = getattr(model, "config", None)
    arch = dataclasses.asdict(config) if dataclasses.is_dataclass(config) and not isinstance(config, type) else {}
    parts = {
        "version": CACHE_VERSION,
        "model": kind,
        "method": method,
        "config": arch,
        "params": sum(p.numel() for p in model.parameters()),
        "dtype": str(model_dtype(model)),
        "input": [list(x.shape), str(x.dtype)],
        "device": device_name(x.device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "backends": {m: version_of(m) for m in ("zentorch", "openvino", "torchao", "nncf")},
        "fp8": fp8,
        **(extra or {}),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


_CACHED_SPEED = Range(float, low=0, high=1e9, low_open=True)  # img/s; far above any machine's


def cached_entry(key: str, *, known: Collection[str]) -> dict[str, Any] | None:
    """The remembered choice for `key` ({"choice", "img_per_s", ...}), or None; a choice not among
    the `known` candidates counts as none."""
    path = cache_file()
    try:  # written whole (atomically): no lock needed to read it
        entries = read_json(path, what="vitzoo's optimize cache").get("choices", {})
    except (OSError, ValueError):  # no cache yet, or an unreadable one: measure again
        return None
    entry = entries.get(key) if isinstance(entries, dict) else None
    choice = entry.get("choice") if isinstance(entry, dict) else None
    speeds = entry.get("img_per_s") if isinstance(entry, dict) else None
    # Speeds are reported as measured: a negative, infinite or absurd one (a tampered or damaged
    # file) makes the entry absent, and the choice is measured again.
    plausible = isinstance(speeds, dict) and all(_CACHED_SPEED.contains(v) for v in speeds.values())
    if isinstance(choice, str) and (choice == "eager" or choice in known) and plausible:
        return entry
    return None


class Choice(Protocol):
    """What is remembered of a choice (an OptimizeReport has it)."""

    choice: str
    device: str
    img_per_s: dict[str, float]


def remember(key: str, report: Choice, settings: dict[str, str] | None = None) -> None:
    """Record `report`'s choice under `key`, with the int8 `settings` kept (candidate -> setting)."""
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Other processes record their choices too: read, add and write under one file lock, so
        # that none of them drops another's entry.
        with filelock.FileLock(f"{path}.lock", timeout=CACHE_LOCK_WAIT_S):
            try:
                data = read_json(path, what="vitzoo's optimize cache")
            except (OSError, ValueError):
                data = {}
            choices: dict[str, Any] = data["choices"] if isinstance(data.get("choices"), dict) else {}
            choices[key] = {"choice": report.choice, "device": report.device, "img_per_s": report.img_per_s}
            if settings:
                choices[key]["int8_settings"] = settings
            write_json(path, {"choices": choices})
    except OSError as exc:  # a read-only home or a lock held too long only costs the next run a new measurement
        print(f"optimize: could not record the choice in {path}: {exc}", file=sys.stderr)
