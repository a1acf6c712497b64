"""benchmarks/dense.py end to end at a toy size: the scenes built, a backbone trained for one epoch
and a random one, `vitzoo segment` run per arm and evaluation mode, the table and the JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dense.py"


@pytest.mark.slow
def test_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("skimage")
    out = tmp_path / "dense.json"
    command = [sys.executable, str(SCRIPT), "--out", str(tmp_path / "runs"), "--train", "4", "--val", "2"]
    command += ["--epochs", "1", "--steps", "3", "--threads", "1", "--arms", "random,tiles", "--json", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["arms"]) == {"random", "tiles"}
    assert set(report["arms"]["tiles"]) == {"backbone", "slide", "whole", "slide, layers 1"}
    for runs in report["arms"].values():
        for mode in ("slide", "whole"):
            run = runs[mode]
            assert set(run["result"]) == {"miou", "pixel_accuracy", "per_class_iou"}
            assert run["seconds"] > 0 and run["peak_mb"] > 0
    assert 0 < report["arms"]["tiles"]["backbone"]["val_acc"] <= 1
    assert "| tiles | whole |" in proc.stdout and "| random | slide |" in proc.stdout
