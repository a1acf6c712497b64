"""benchmarks/dense.py end to end at a toy size: the scenes built, the random arm's backbone saved,
`vitzoo segment` run per evaluation mode, the table and the JSON report. (The trained arms add a
`fit` on the digit tiles before the same runs; training is tested in tests/train, the tiles in
tests/data/test_synthetic_seg.py.)"""

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
    command += ["--epochs", "1", "--steps", "3", "--threads", "1", "--arms", "random", "--json", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["arms"]) == {"random"}
    assert set(report["arms"]["random"]) == {"backbone", "slide", "whole"}
    for runs in report["arms"].values():
        for mode in ("slide", "whole"):
            run = runs[mode]
            assert set(run["result"]) == {"miou", "pixel_accuracy", "per_class_iou"}
            assert run["seconds"] > 0 and run["peak_mb"] > 0
    assert report["arms"]["random"]["backbone"] == {}  # untrained
    assert "| random | whole |" in proc.stdout and "| random | slide |" in proc.stdout
