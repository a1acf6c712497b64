"""Run records: one JSON line per epoch in `metrics.jsonl`, its line in the log, and `curves.png`
(loss and accuracy)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch

from ..atomic import atomic_path
from ..jsonio import parse_json, to_json

METRICS_NAME = "metrics.jsonl"
CURVES_NAME = "curves.png"
_RECORD = "one JSON object per line, an epoch's metrics"


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    lines = enumerate(path.read_bytes().splitlines(), start=1)
    return [parse_json(line, where=f"{path}:{n}", what=_RECORD) for n, line in lines if line.strip()]


def write_metrics(path: str | os.PathLike[str], records: list[dict[str, Any]]) -> None:
    """Rewrite the whole file atomically (a few hundred lines at most): a resumed run drops the
    records of epochs it is about to redo, and a kill never leaves half a line."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(to_json(r) + "\n" for r in records), encoding="utf-8")


def format_epoch(record: dict[str, Any], epochs: int, *, ema: bool) -> str:
    """An epoch's metrics record as the one line the run prints."""
    return (
        f"epoch {record['epoch'] + 1:>3}/{epochs}  train loss {record['train_loss']:.4f} acc {100 * record['train_acc']:.2f}%"
        + (f" (teacher term {record['train_distill_loss']:.4f})" if "train_distill_loss" in record else "")
        + f"  val loss {record['val_loss']:.4f} acc {100 * record['val_acc']:.2f}%"
        + (f" (EMA; weights {100 * record['raw_val_acc']:.2f}%)" if ema else "")
        + f"  ({record['epoch_time_s']:.1f} s, "
        f"{record['train_images_per_s']:.0f} img/s)"
    )


def plot_curves(records: list[dict[str, Any]], path: str | os.PathLike[str], title: str = "") -> Path | None:
    """Loss and accuracy (train/val) against epoch, drawn by `vitzoo.viz.plot_curves` (the one
    place that draws curves); None, with a warning, when matplotlib (the viz extra) is missing."""
    from ..viz import plot_curves as draw_curves
    from ..viz import require_matplotlib

    try:
        require_matplotlib()
    except ImportError as err:
        warnings.warn(f"skipping {Path(path).name}: {err}", stacklevel=2)
        return None
    draw_curves(records, out=path, title=title or None, keys=["*loss", "*acc"])
    return Path(path)


def format_confusion(matrix: torch.Tensor, classes: tuple[str, ...] | list[str]) -> str:
    """A text table: rows are true classes, columns predictions, with per-class recall."""
    names = [c if len(c) <= 12 else c[:11] + "~" for c in classes]
    width = max(5, max(len(n) for n in names), len(str(int(matrix.max()))) if matrix.numel() else 1)
    header = " " * (width + 2) + " ".join(f"{i:>{width}}" for i in range(len(names))) + "   recall"
    lines = ["confusion matrix (rows: true class, columns: predicted class index)", header]
    for i, row in enumerate(matrix.tolist()):
        total = sum(row)
        recall = f"{100 * row[i] / total:6.1f}%" if total else "     -"
        lines.append(f"{names[i]:>{width}} " + " " + " ".join(f"{v:>{width}}" for v in row) + "  " + recall)
    legend = ", ".join(f"{i}={n}" for i, n in enumerate(classes))
    if any(n != str(i) for i, n in enumerate(classes)):
        lines.append(f"classes: {legend}")
    return "\n".join(lines)
