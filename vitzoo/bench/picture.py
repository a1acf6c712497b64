"""Accuracy against speed: each release's best measured img/s (log scale) against its ImageNet
top-1, the Pareto front (the releases no other beats at once in speed and accuracy) marked, every
point named.

Accuracy is not measured here: it comes from `--accuracy FILE` (a CSV of model,top1) or from the
release cards (`vitzoo.cards.card(name)["top1"]`, where that module exists). A release with no
accuracy known is not drawn; the picture says how many.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .results import Row

# The columns `--accuracy FILE` must have (others are ignored).
ACCURACY_COLUMNS = ("model", "top1")


class AccuracyFileError(ValueError):
    """An --accuracy file that cannot be read: names the file, the line and what is wrong."""


@dataclasses.dataclass(frozen=True)
class Point:
    name: str
    img_per_s: float
    top1: float


def read_accuracy(path: Path) -> dict[str, float]:
    """model -> top-1 (percent) from a CSV with the columns model and top1."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ACCURACY_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise AccuracyFileError(f"--accuracy {path}: no column {', '.join(missing)} (expected model,top1)")
            table = {}
            for line, entry in enumerate(reader, start=2):
                table[entry["model"]] = _top1(entry["top1"], f"--accuracy {path}, line {line}")
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise AccuracyFileError(f"--accuracy {path}: cannot read it ({err})") from err
    return table


def _top1(text: str | None, where: str) -> float:
    try:
        value = float(text or "")
    except ValueError:
        value = math.nan
    if not 0 <= value <= 100:
        raise AccuracyFileError(f"{where}: top1 must be a percentage from 0 to 100, got {text!r}")
    return value


def card_top1(name: str) -> float | None:
    """The ImageNet top-1 (percent) that the card of release `name` states (vitzoo/cards.py), None
    where its source states none (a backbone, a release timm published no results for)."""
    from ..cards import card
    from ..registry import resolve

    value = card(resolve(name)).get("top1")
    return float(value) if value is not None else None


def accuracy_of(names: Iterable[str], table: Mapping[str, float] | None) -> dict[str, float]:
    """name -> top-1 of each name `table` (--accuracy) knows, else its card knows."""
    found = {}
    for name in names:
        value = table.get(name) if table is not None else None
        value = value if value is not None else card_top1(name)
        if value is not None:
            found[name] = value
    return found


def best_speeds(rows: Sequence[Row], machine: Mapping[str, str]) -> dict[str, float]:
    """model -> its highest img/s over the batches and runners measured on `machine` (the
    columns that name the device, dtype and versions): rows of other machines are not compared."""
    best: dict[str, float] = {}
    for entry in rows:
        if any(entry[k] != v for k, v in machine.items()):
            continue
        try:
            speed = float(entry["infer_samples_per_sec"])
        except ValueError:
            continue
        best[entry["model"]] = max(speed, best.get(entry["model"], 0.0))
    return best


def pareto(points: Sequence[Point]) -> list[Point]:
    """The points no other point matches or beats in both speed and accuracy while beating in one."""

    def dominated(p: Point) -> bool:
        return any(
            q.img_per_s >= p.img_per_s and q.top1 >= p.top1 and (q.img_per_s > p.img_per_s or q.top1 > p.top1)
            for q in points
        )

    return sorted((p for p in points if not dominated(p)), key=lambda p: p.img_per_s)


def draw(points: Sequence[Point], unknown: int, title: str, path: Path) -> Path:
    """The PNG at `path`, written atomically (vitzoo.viz: matplotlib, the `viz` extra; an
    ImportError naming it where absent). `unknown`: releases measured but not drawn."""
    from ..viz._figure import new_figure, save_png

    fig = new_figure(9, 6)
    ax = fig.add_subplot()
    front = pareto(points)
    on_front = {p.name for p in front}
    ax.scatter(
        [p.img_per_s for p in points],
        [p.top1 for p in points],
        c=["tab:red" if p.name in on_front else "tab:blue" for p in points],
        s=24,
        zorder=2,
    )
    if front:
        # a staircase: faster than one release of the front, only the faster ones' accuracy is to be
        # had; a release above or right of it would be on the front too
        speeds, top1s = [p.img_per_s for p in front], [p.top1 for p in front]
        ax.step(speeds, top1s, "--", where="pre", color="tab:red", label="Pareto front")
        ax.legend(loc="lower left")
    for p in points:
        ax.annotate(p.name, (p.img_per_s, p.top1), xytext=(4, 3), textcoords="offset points", fontsize=7)
    ax.set_xscale("log")
    ax.margins(x=0.15, y=0.08)  # room for the names of the outermost points
    ax.set_xlabel("images per second (log scale; each release's best batch and runner)")
    ax.set_ylabel("ImageNet top-1 (%)")
    ax.grid(True, which="both", alpha=0.3)
    note = f"; {unknown} release(s) not drawn: no accuracy known" if unknown else ""
    ax.set_title(f"{title}{note}", fontsize=9)
    if not points:
        ax.text(0.5, 0.5, "no release with a known accuracy", ha="center", va="center", transform=ax.transAxes)
    return save_png(fig, path)


__all__ = [
    "ACCURACY_COLUMNS",
    "AccuracyFileError",
    "Point",
    "accuracy_of",
    "best_speeds",
    "card_top1",
    "draw",
    "pareto",
]
