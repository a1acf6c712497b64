"""What vitzoo measured on this machine, remembered between runs: where (`cache_dir`), reading one
section of a cache file back, and adding an entry to it under a file lock (other processes add
theirs too). The CPU's bf16 probe (precision_probe.py) keeps its answers here; optimize's choices
(inference/cache.py) live in the same folder. Only layer 0, so every layer may use it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import filelock

from .atomic import write_json
from .jsonio import read_json

# How long recording an entry waits for another process recording its own.
LOCK_WAIT_S = 10.0


def cache_dir() -> Path:
    """Where vitzoo remembers measurements: $VITZOO_CACHE, else $XDG_CACHE_HOME/vitzoo, else
    ~/.cache/vitzoo."""
    root = os.environ.get("VITZOO_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vitzoo"
    return Path(root)


def read_section(path: Path, section: str, *, what: str) -> dict[str, Any]:
    """The `section` object of the cache file `path`; {} where there is none yet, or the file is
    damaged (what it held is measured again). Written whole (atomically): no lock needed to read."""
    try:
        entries = read_json(path, what=what).get(section, {})
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def record(path: Path, section: str, key: str, entry: dict[str, Any], *, what: str) -> str | None:
    """Add `entry` under `key` in the `section` of the cache file `path`: read, add and write under
    one file lock, so that no process drops another's entry. Returns None, or why it could not be
    recorded (a read-only home, a lock held too long: that only costs the next run a measurement)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(f"{path}.lock", timeout=LOCK_WAIT_S):
            try:
                data = read_json(path, what=what)
            except (OSError, ValueError):
                data = {}
            entries = data.get(section)
            data[section] = {**(entries if isinstance(entries, dict) else {}), key: entry}
            write_json(path, data)
    except OSError as exc:
        return f"could not record it in {path}: {exc}"
    return None
