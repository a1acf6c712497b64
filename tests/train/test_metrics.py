"""vitzoo/train/metrics.py: metrics.jsonl, curves.png, the confusion-matrix table."""

from __future__ import annotations

from pathlib import Path

import torch

from vitzoo.train.metrics import format_confusion, plot_curves, read_metrics, write_metrics


def test_metrics_round_trip_and_png(tmp_path: Path) -> None:
    records = [
        {
            "epoch": e,
            "train_loss": 1.0 / (e + 1),
            "val_loss": 1.2 / (e + 1),
            "train_acc": 0.5 + e / 10,
            "val_acc": 0.45 + e / 10,
        }
        for e in range(3)
    ]
    write_metrics(tmp_path / "m.jsonl", records)
    assert read_metrics(tmp_path / "m.jsonl") == records
    png = plot_curves(records, tmp_path / "c.png", title="t")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


def test_confusion_table_rows_are_true_classes() -> None:
    text = format_confusion(torch.tensor([[3, 1], [0, 4]]), ("cat", "dog"))
    lines = text.splitlines()
    assert "recall" in lines[1]
    assert lines[2].split()[:3] == ["cat", "3", "1"] and lines[2].endswith("75.0%")
    assert lines[3].endswith("100.0%") and "0=cat, 1=dog" in lines[-1]
