"""Atomic file writes: a reader (or a crash) sees the old file or the complete new one, never half.

Every file vitzoo writes goes through here: weights, configs, training checkpoints, metrics, PNGs.
It imports nothing of vitzoo, so every layer may use it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

StateDict = dict[str, torch.Tensor]


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success fsync it and rename it over `path`, on
    failure delete it. Readers therefore see either the old file or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # Make the rename itself durable; not every platform can open a directory.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_safetensors(path: str | os.PathLike[str], tensors: StateDict, metadata: dict[str, str] | None = None) -> Path:
    """Write `tensors` as a safetensors file, atomically. Shared or strided tensors are copied
    to contiguous ones first (safetensors stores each tensor as its own contiguous buffer)."""
    from safetensors.torch import save_file

    seen: set[int] = set()
    clean: StateDict = {}
    for key, t in tensors.items():
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        ptr = t.untyped_storage().data_ptr() if t.numel() else -1
        if not t.is_contiguous() or ptr in seen:
            t = t.clone(memory_format=torch.contiguous_format)
        if ptr != -1:
            seen.add(ptr)
        clean[key] = t
    with atomic_path(path) as tmp:
        save_file(clean, str(tmp), metadata=metadata)
    return Path(path)


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return Path(path)
