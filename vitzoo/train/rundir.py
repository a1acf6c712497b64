"""Which directories a run may write into (`--out`), and how a vitzoo run directory is recognised.

A run owns its directory: it writes checkpoint.safetensors, run.json, metrics.jsonl, curves.png,
best/, run.lock and .run.lock there, replacing files of those names. So a run starts only in a directory
that is missing, empty, or already a vitzoo run: one holding a training checkpoint (continued
with --resume, refused without it) or a run.json written by vitzoo (a run that stopped before its
first checkpoint, started again from scratch). Any other non-empty directory is the user's and is
refused, with or without --resume, naming it and what it holds; nothing in it is touched.
"""

from __future__ import annotations

from pathlib import Path

from ..atomic import is_temp_file
from ..jsonio import JSONFileError, read_json
from .checkpoint import CHECKPOINT_NAME
from .lock import LOCK_NAME, OS_LOCK_NAME

RUN_INFO_NAME = "run.json"
# The key every run.json that vitzoo writes has (start.py's _run_info): a run.json without it is
# someone else's.
_RUN_INFO_KEY = "train_config"


def is_run_dir(directory: Path) -> bool:
    """Whether `directory` holds a vitzoo run: a training checkpoint, or vitzoo's run.json."""
    if (directory / CHECKPOINT_NAME).exists():
        return True
    try:
        return _RUN_INFO_KEY in read_json(directory / RUN_INFO_NAME)
    except JSONFileError:
        return False


def check_out_dir(directory: Path) -> None:
    """Refuse to start a run in `directory` unless it is missing, empty (but for a lock or the
    temporary files of interrupted writes) or a vitzoo run (the module docstring has the rules)."""
    if not directory.exists():
        return
    if not directory.is_dir():
        raise FileExistsError(f"--out {directory} is a file, not a directory; pass --out a new or empty directory")
    entries = sorted(
        p.name for p in directory.iterdir() if p.name not in (LOCK_NAME, OS_LOCK_NAME) and not is_temp_file(p.name)
    )
    if not entries or is_run_dir(directory):
        return
    shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
    raise FileExistsError(
        f"--out {directory} is a non-empty directory that is not a vitzoo run (it holds {shown}); a run writes "
        f"{CHECKPOINT_NAME}, {RUN_INFO_NAME}, metrics.jsonl, curves.png and best/ into its directory, replacing "
        "files of those names, so it starts only in a new or empty directory or continues a vitzoo run: pass "
        "--out a new directory"
    )
