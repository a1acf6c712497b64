"""`vitzoo bench`: the releases' speed on this machine, eager and the way `vitzoo.optimize` runs
them, as a CSV with timm's benchmark columns, and an accuracy-against-speed picture.

    from vitzoo.bench import Settings, benchmark, select
    targets, too_big = select(["vit_s16*", "deit_t*"], max_params=30)
    done = benchmark(targets, Settings(batch_sizes=(1, 32), device=torch.device("cpu"), dtype=torch.float32))
    done.csv, done.png   # vitzoo-bench.csv, vitzoo-bench.png in the current folder

Why a sweep of its own: timm's published tables are of other machines, and which way of running a
ViT is fastest depends on the processor, the batch and what is installed (vitzoo/inference). A
sweep is long, so it is resumable: each row is appended as it is measured, and a run over the same
file measures only the rows missing for this device, dtype and versions (a sweep killed halfway
goes on where it stopped). Models are built with random weights: speed does not depend on values.

Modules: `sweep.py` (the releases chosen and timed), `results.py` (the CSV: columns, resuming,
appending), `picture.py` (accuracy, the Pareto front, the PNG).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .picture import AccuracyFileError, Point, accuracy_of, best_speeds, draw, pareto, read_accuracy
from .results import COLUMNS, ResultsFileError, Row, read_results, start_file
from .sweep import Settings, Target, machine_columns, run_sweep, select

CSV_NAME = "vitzoo-bench.csv"
PNG_NAME = "vitzoo-bench.png"


@dataclasses.dataclass
class BenchResult:
    """What a run did: the files, the rows measured now, how many were already in the CSV, the
    releases the size limits left out, those that failed (name -> why), and the releases drawn /
    without accuracy."""

    csv: Path
    png: Path | None
    measured: list[Row]
    already: int
    dropped: list[str]
    failed: dict[str, str]
    drawn: list[Point] = dataclasses.field(default_factory=list)
    no_accuracy: list[str] = dataclasses.field(default_factory=list)


def benchmark(
    targets: Sequence[Target],
    settings: Settings,
    out: Path = Path("."),
    *,
    accuracy: dict[str, float] | None = None,
    picture: bool = True,
    progress: Callable[[int], Any] | None = None,
    dropped: Sequence[str] = (),
) -> BenchResult:
    """Time `targets` (see `select`) into `out`/vitzoo-bench.csv, resuming what is there, then draw
    `out`/vitzoo-bench.png from every row of this machine in the file (`accuracy`: model -> top-1
    before the release cards). Without matplotlib the CSV is written and an ImportError naming the
    `viz` extra is raised at the end (a warning says so at the start)."""
    csv_path, png_path = out / CSV_NAME, out / PNG_NAME
    existing = read_results(csv_path)
    if picture and importlib.util.find_spec("matplotlib") is None:
        warnings.warn(
            f"matplotlib is not installed: {csv_path} will be written, no picture (pip install 'vitzoo[viz]')",
            stacklevel=2,
        )
    start_file(csv_path)
    sweep = run_sweep(targets, settings, csv_path, existing, progress)
    result = BenchResult(csv_path, None, sweep.measured, len(existing), list(dropped), sweep.failed)
    if picture:
        result.png = _picture(result, [*existing, *sweep.measured], settings, png_path, accuracy)
    return result


def _picture(
    result: BenchResult, rows: list[Row], settings: Settings, path: Path, accuracy: dict[str, float] | None
) -> Path:
    """Draw the PNG of this machine's rows; the points and the names left undrawn go into `result`."""
    machine = machine_columns(settings.device, settings.dtype)
    speeds = best_speeds(rows, machine)
    known = accuracy_of(speeds, accuracy)
    result.drawn = [Point(name, speed, known[name]) for name, speed in speeds.items() if name in known]
    result.no_accuracy = sorted(set(speeds) - set(known))
    title = f"{machine['device']}, {machine['dtype']}, torch {machine['torch']}, vitzoo {machine['vitzoo']}"
    try:
        return draw(result.drawn, len(result.no_accuracy), title, path)
    except ImportError as err:
        raise ImportError(f"{err} ({result.csv} is written; no picture)") from err


__all__ = [
    "COLUMNS",
    "CSV_NAME",
    "PNG_NAME",
    "AccuracyFileError",
    "BenchResult",
    "Point",
    "ResultsFileError",
    "Settings",
    "Target",
    "benchmark",
    "pareto",
    "read_accuracy",
    "select",
]
