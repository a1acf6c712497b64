"""`curves`: loss and accuracy of a fine-tuning run, from its `metrics.jsonl`.

The file has one JSON object per line (one per epoch, or per logging step), e.g.
{"epoch": 1, "train_loss": 0.52, "train_acc": 0.84, "val_loss": 0.31, "val_acc": 0.91, "lr": 0.001}.
Any numeric key is drawn; keys are grouped by name into panels: losses together, accuracies
together (in %, when they are fractions), the learning rate on a log scale, and every other
number in a panel of its own. The x axis is `epoch` or `step` when every line has it, else the
line number. Non-numeric values (strings, lists, booleans) are ignored.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..jsonio import parse_json
from ._figure import finish, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

X_KEYS = ("epoch", "step", "global_step", "iteration", "iter")
_MAX_LINE_BYTES = 1024**2  # a metrics record is a few hundred bytes; more is not a metrics file
_MAX_PANELS = 8  # two rows of four; more would not be readable (the title lists what is left out)


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a metrics.jsonl file (or a run directory that contains one) into a list of dicts."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"metrics file '{path}' does not exist; expected a metrics.jsonl written by a fine-tuning run"
        )
    records: list[dict[str, Any]] = []
    with path.open("rb") as f:
        # readline with a limit: a binary file may have no newline at all, and is not read whole.
        for number, raw in enumerate(iter(lambda: f.readline(_MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > _MAX_LINE_BYTES:
                raise ValueError(
                    f"{path}, line {number}: longer than {_MAX_LINE_BYTES // 1024**2} MiB; "
                    "expected a metrics.jsonl of one short JSON object per line"
                )
            # Decoded line by line so a binary or mis-encoded file is reported with its line, not
            # as a bare UnicodeDecodeError naming neither the file nor what was expected.
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{path}, line {number}: not UTF-8 text (byte {raw[err.start]:#04x} at column {err.start + 1}); "
                    "expected a metrics.jsonl of one JSON object per line, not a binary file"
                ) from None
            if not line.strip():
                continue
            records.append(parse_json(line, where=f"{path}:{number}", what="one JSON object per line"))
    if not records:
        raise ValueError(f"metrics file '{path}' is empty; expected one JSON object per line")
    return records


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def group_metrics(
    records: list[dict[str, Any]], keys: Sequence[str] | None = None
) -> tuple[str | None, dict[str, list[str]]]:
    """(x key or None for line numbers, panel title -> metric keys) for a list of records.
    `keys` are shell-style patterns choosing which metrics to draw (default: every numeric one)."""
    x_key = next((k for k in X_KEYS if all(_is_number(r.get(k)) for r in records)), None)
    available: list[str] = []
    for record in records:
        for key, value in record.items():
            if key not in available and key not in X_KEYS and _is_number(value):
                available.append(key)
    if keys is None:
        keys = available
    else:
        for pattern in keys:
            if not any(fnmatch.fnmatchcase(k, pattern) for k in available):
                raise ValueError(
                    f"metric key pattern {pattern!r} matches no numeric metric; available: {', '.join(available) or 'none'}"
                )
        keys = [k for k in available if any(fnmatch.fnmatchcase(k, p) for p in keys)]
    panels: dict[str, list[str]] = {"loss": [], "accuracy": [], "learning rate": []}
    others: list[str] = []
    for key in keys:
        low = key.lower()
        if "loss" in low:
            panels["loss"].append(key)
        elif "acc" in low or "top1" in low or "top5" in low:
            panels["accuracy"].append(key)
        elif low in ("lr", "learning_rate") or low.endswith("_lr"):
            panels["learning rate"].append(key)
        else:
            others.append(key)
    for key in others:
        panels[key] = [key]
    return x_key, {title: ks for title, ks in panels.items() if ks}


def _series(records: list[dict[str, Any]], key: str, x_key: str | None) -> tuple[list[float], list[float]]:
    """(x, y) of the records that have a number for `key` (others leave a gap, not a zero)."""
    points = [(r[x_key] if x_key else i, r[key]) for i, r in enumerate(records) if _is_number(r.get(key))]
    return [x for x, _ in points], [y for _, y in points]


def plot_curves(
    metrics: str | os.PathLike[str] | list[dict[str, Any]],
    *,
    out: str | os.PathLike[str] | None = None,
    dpi: int = 100,
    title: str | None = None,
    keys: Sequence[str] | None = None,
) -> Figure:
    """Draw every numeric metric of a run (a metrics.jsonl path, a run directory, or the records),
    or those matching the shell-style patterns in `keys` (e.g. ["*loss", "*acc"]).
    The figure is 4 inches per panel wide (at most 4 panels a row) and 3.5 inches per row."""
    records = read_metrics(metrics) if not isinstance(metrics, list) else metrics
    source = str(metrics) if not isinstance(metrics, list) else "the given records"
    x_key, panels = group_metrics(records, keys)
    if not panels:
        raise ValueError(
            f"{source} has no numeric metrics besides {', '.join(X_KEYS)}; expected keys like train_loss, val_acc"
        )
    names = list(panels)
    names, dropped = names[:_MAX_PANELS], names[_MAX_PANELS:]

    ncols = min(4, len(names))
    nrows = -(-len(names) // ncols)
    fig = new_figure(4 * ncols, 3.5 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, name in zip(axes, names):
        series = {key: _series(records, key, x_key) for key in panels[name]}
        # Accuracies logged as fractions are drawn in percent, the unit people read them in.
        as_percent = name == "accuracy" and all(0.0 <= y <= 1.0 for _, ys in series.values() for y in ys)
        for key, (xs, ys) in series.items():
            ys = [100.0 * y for y in ys] if as_percent else ys
            ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, label=key)
            if name == "accuracy" and ys and any(t in key.lower() for t in ("val", "test", "eval")):
                # Mark the best held-out value: what one looks for first.
                best = max(range(len(ys)), key=ys.__getitem__)
                ax.annotate(
                    f"{ys[best]:.2f}",
                    (xs[best], ys[best]),
                    textcoords="offset points",
                    xytext=(0, 5),
                    ha="center",
                    fontsize=7,
                )
        ax.margins(y=0.12)  # room for the label of the best value
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(x_key or "line", fontsize=8)
        if as_percent:
            ax.set_ylabel("%", fontsize=8)
        if name == "learning rate" and all(y > 0 for _, ys in series.values() for y in ys):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    for ax in axes[len(names) :]:
        ax.set_axis_off()
    heading = title or f"{len(records)} records from {source}"
    if dropped:
        heading += f" (not drawn: {', '.join(dropped)})"
    fig.suptitle(heading, fontsize=10)
    return finish(fig, out, dpi)
