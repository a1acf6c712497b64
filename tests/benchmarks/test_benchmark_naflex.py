"""benchmarks/naflex.py --smoke end to end: both pipelines timed on the same photos, the ratios, and
the memory of each case (with and without a huge photo) measured in fresh processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "naflex.py"


@pytest.mark.slow
def test_naflex_benchmark_smoke(tmp_path: Path) -> None:
    pytest.importorskip("skimage")
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc/self/clear_refs to reset the peak RSS")
    out = tmp_path / "naflex.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--threads", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    naflex, square = report["throughput"]["naflex"], report["throughput"]["square"]
    assert square["tokens_per_image"] == 64 and 0 < naflex["tokens_per_image"] <= 64  # the same budget
    for key, ratio in report["ratio_naflex_over_square"].items():
        assert ratio == pytest.approx(naflex[key] / square[key])
    assert set(report["memory"]) == {"naflex", "naflex+huge", "square", "square+huge"}
    for case in report["memory"].values():
        assert case["batch_mb"] > 0 and case["growth_mb"] >= 0
    # one more image in the batch, whatever its size: the batch grows by one budget's patches
    grown = report["memory"]["naflex+huge"]["batch_mb"] - report["memory"]["naflex"]["batch_mb"]
    assert grown <= 64 * 16 * 16 * 3 * 4 / 2**20 + 0.01
    assert "ratio" in proc.stdout and "megapixel photo added" in proc.stdout
