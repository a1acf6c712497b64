"""benchmarks/busy_cpu.py end to end, briefly: every policy measured idle and against a competitor
it starts and stops itself, and a JSON report with the ratios the goals are stated in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "busy_cpu.py"


@pytest.mark.slow
def test_benchmark_runs_end_to_end_and_leaves_no_competitor(tmp_path: Path):
    out = tmp_path / "busy.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--seconds", "0.3", "--batch", "16", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report["median_img_s"]) == {"fixed", "auto", "one"}
    assert all(v["idle"] > 0 and v["busy"] > 0 for v in report["median_img_s"].values())
    assert report["idle_over_fixed_idle"]["fixed"] == pytest.approx(1.0)
    assert "goal: auto keeps >= 40% of idle throughput" in proc.stdout
    # the competitor is a child that was killed: no busy loop of ours survives the benchmark
    survivors = subprocess.run(["pgrep", "-f", "while time.monotonic() < end"], capture_output=True, text=True)
    assert survivors.stdout.strip() == ""
