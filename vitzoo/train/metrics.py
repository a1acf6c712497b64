"""Run records: one JSON line per epoch in `metrics.jsonl`, and `curves.png` (loss and accuracy)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from ..weights.files import atomic_path

METRICS_NAME = "metrics.jsonl"
CURVES_NAME = "curves.png"


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_metrics(path: str | os.PathLike[str], records: list[dict[str, Any]]) -> None:
    """Rewrite the whole file atomically (a few hundred lines at most): a resumed run drops the
    records of epochs it is about to redo, and a kill never leaves half a line."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def plot_curves(records: list[dict[str, Any]], path: str | os.PathLike[str], title: str = "") -> Path | None:
    """Loss (train/val) and accuracy (train/val) against epoch; None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("matplotlib is not installed: skipping curves.png (pip install 'vitzoo[viz]')", stacklevel=2)
        return None
    epochs = [r["epoch"] + 1 for r in records]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [r["train_loss"] for r in records], "o-", label="train")
    ax_loss.plot(epochs, [r["val_loss"] for r in records], "s-", label="val")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    ax_acc.plot(epochs, [100 * r["train_acc"] for r in records], "o-", label="train")
    ax_acc.plot(epochs, [100 * r["val_acc"] for r in records], "s-", label="val")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
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
