"""benchmarks/distill.py end to end on a few hundred digits written as a Fashion-MNIST directory:
it trains the teacher when none is given, compares the student with and without it, times the
teacher's cost, reuses the teacher's run as Mixup's "off" run, and reports it all as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vitzoo.data import load_mnist_sample, write_idx

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "distill.py"


@pytest.mark.slow
def test_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    data = tmp_path / "fashion"
    data.mkdir()
    sample = load_mnist_sample()  # digits stand in for clothes: only the file layout matters here
    write_idx(data / "train-images-idx3-ubyte.gz", sample.train.images[:300, 0])
    write_idx(data / "train-labels-idx1-ubyte.gz", sample.train.labels[:300].to(torch.uint8))
    write_idx(data / "t10k-images-idx3-ubyte.gz", sample.val.images[:100, 0])
    write_idx(data / "t10k-labels-idx1-ubyte.gz", sample.val.labels[:100].to(torch.uint8))
    out = tmp_path / "distill.json"
    command = [sys.executable, str(SCRIPT), "--fashion-dir", str(data), "--epochs", "1", "--threads", "1"]
    command += ["--rounds", "1", "--modes", "hard", "soft", "--json", str(out), "--workdir", str(tmp_path / "runs")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["distill"]) == {"no_teacher", "hard", "soft"}
    assert all(0 <= run["final_acc"] <= 1 for run in report["distill"].values())
    assert report["distill_gain"]["hard"] == pytest.approx(
        report["distill"]["hard"]["final_acc"] - report["distill"]["no_teacher"]["final_acc"], abs=1e-4
    )
    cost = report["teacher_cost"]["interleaved"]
    assert cost["ms_per_step_with_teacher"] > 0 and cost["ms_per_step_without_teacher"] > 0
    assert report["student"]["params"] < report["teacher"]["params"]  # 2 blocks against vit_mnist's 4
    assert report["mix"]["off"]["reused"] == "the teacher's run"  # the teacher was trained with the same recipe
    assert "gain" in proc.stdout and "mix " in proc.stdout
