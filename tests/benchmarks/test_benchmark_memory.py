"""benchmarks/memory.py end to end on a small model: both variants run in their own process, take
the same training step (the script checks their losses agree) and the report has the ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "memory.py"


@pytest.mark.slow
def test_memory_benchmark_reports_both_variants_and_their_ratio(tmp_path: Path):
    out = tmp_path / "memory.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", "vit_ti16", "--depth", "1", "--batch", "2", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report["median"]) == {"plain", "checkpointed"}
    for variant, runs in report["runs"].items():
        assert len(runs) == 1 and runs[0]["variant"] == variant
        assert runs[0]["peak_mb"] >= runs[0]["before_mb"] > 0
    ratio = report["ratio_checkpointed_over_plain"]
    assert ratio["peak_mb"] == pytest.approx(
        report["median"]["checkpointed"]["peak_mb"] / report["median"]["plain"]["peak_mb"]
    )
    assert "ratio" in proc.stdout
