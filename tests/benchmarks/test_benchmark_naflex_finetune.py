"""benchmarks/naflex_finetune.py end to end at its smoke size: it builds the crops, trains with and
without --naflex through `vitzoo finetune` and reports each run's curve as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "naflex_finetune.py"


@pytest.mark.slow
def test_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("skimage", reason="the photos are scikit-image's")
    out = tmp_path / "naflex.json"
    command = [sys.executable, str(SCRIPT), "--smoke", "--max-patches", "16", "--threads", "1", "--json", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*command, "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["model"]["img_size"] == 64  # 4 x 4 patches of 16: the square run's budget
    for name in ("naflex", "square"):
        assert [p["epoch"] for p in report[name]["curve"]] == [0, 1]
        assert report[name]["best_val_acc"] == max(p["val_acc"] for p in report[name]["curve"])
    run = json.loads((tmp_path / "naflex" / "run.json").read_text())
    assert run["train_config"]["naflex"] is True and run["train_config"]["max_patches"] == 16
