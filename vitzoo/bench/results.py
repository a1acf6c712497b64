"""The benchmark CSV: timm's benchmark columns plus what makes a row comparable (runner, dtype,
device, versions), read back for resuming, each new row appended and synced as soon as it is
measured.

A sweep over many releases can take hours and be killed at any moment, so rows are not collected
and written at the end: each one is appended and fsynced on its own, and a later run reads the
file, keeps what is there and measures only what is missing. A kill during an append can leave
the last line cut short; that line is dropped (with a warning) and its row measured again.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections.abc import Mapping
from pathlib import Path

from ..atomic import atomic_path

# timm's results/benchmark-infer-*.csv columns first (param_count in millions, infer_step_time in
# ms per batch, infer_gmacs per image), then vitzoo's: how the model ran and on what (a CPU's
# speed depends on the threads torch uses as much as on the CPU).
TIMM_COLUMNS = (
    "model",
    "infer_img_size",
    "infer_samples_per_sec",
    "infer_step_time",
    "infer_batch_size",
    "param_count",
    "infer_gmacs",
    "infer_macts",
)
COLUMNS = (*TIMM_COLUMNS, "runner", "dtype", "device", "threads", "torch", "vitzoo")

# A row is the same measurement as another (and is not measured again) when these agree.
KEY_COLUMNS = (
    "model",
    "infer_img_size",
    "infer_batch_size",
    "runner",
    "dtype",
    "device",
    "threads",
    "torch",
    "vitzoo",
)

Row = dict[str, str]


class ResultsFileError(ValueError):
    """A results file that is not one `vitzoo bench` wrote: names the file and what is wrong."""


def mode_of(runner: str) -> str:
    """ "eager" or "optimize": what a row was asked to measure (the optimized runner's name is
    only known once optimize has chosen, so resuming compares modes, not choices)."""
    return "eager" if runner == "eager" else "optimize"


def row_key(row: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(mode_of(row[c]) if c == "runner" else row[c] for c in KEY_COLUMNS)


def read_results(path: Path) -> list[Row]:
    """The rows already in `path` ([] where it does not exist or is empty). A header other than
    COLUMNS is refused (ResultsFileError): appending would mix two tables. A last line cut short
    by a kill is removed from the file with a warning; a malformed row elsewhere is ignored with
    a warning (and measured again)."""
    if not path.exists():
        return []
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ResultsFileError(f"cannot read {path}: {err.strerror or err}") from err
    if not data.strip():
        return []
    if not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        warnings.warn(
            f"{path}: its last line was cut short (a run killed while writing it); measuring it again", stacklevel=3
        )
        _rewrite(path, data)
    try:
        lines = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as err:
        raise ResultsFileError(f"{path} is not a CSV file that vitzoo bench wrote ({err})") from err
    if not lines or tuple(lines[0]) != COLUMNS:
        found = ",".join(lines[0]) if lines else "nothing"
        raise ResultsFileError(
            f"{path} has the columns {found!r}, not vitzoo bench's; give another --out or move the file away"
        )
    rows = [dict(zip(COLUMNS, fields)) for fields in lines[1:] if len(fields) == len(COLUMNS)]
    if len(rows) != len(lines) - 1:
        bad = len(lines) - 1 - len(rows)
        warnings.warn(f"{path}: {bad} malformed row(s) ignored; their measurements are made again", stacklevel=3)
    return rows


def _rewrite(path: Path, data: bytes) -> None:
    """`path` replaced by `data` atomically: a second kill while repairing leaves the old file."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def start_file(path: Path) -> None:
    """A new results file holding the header alone, unless `path` already has one."""
    if path.exists() and path.stat().st_size > 0:
        return
    _rewrite(path, _line(COLUMNS).encode("utf-8"))


def append_row(path: Path, row: Mapping[str, str]) -> None:
    """Add one row at the end of `path` in one write, flushed and fsynced before returning: a kill
    after this keeps the row, a kill during it leaves a line cut short that `read_results` drops."""
    line = _line([row[c] for c in COLUMNS]).encode("utf-8")
    with open(path, "ab") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _line(fields: tuple[str, ...] | list[str]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(fields)
    return buffer.getvalue()
