"""benchmarks/stream.py end to end on a few hundred generated JPEGs: memory at two folder sizes,
throughput of vitzoo's streaming loader and timm's, and the JSON report the goals are read from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "stream.py"


@pytest.mark.slow
def test_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("timm")
    out = tmp_path / "stream.json"
    command = [sys.executable, str(SCRIPT), "--sizes", "250", "500", "--images", "48", "--batch", "16"]
    command += ["--workers", "1", "--rounds", "1", "--dir", str(tmp_path / "photos"), "--json", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [run["images_in_folder"] for run in report["memory"]] == [250, 500]
    assert all(run["peak_pss_total_mb"] > 0 and run["images_iterated"] >= 48 for run in report["memory"])
    assert report["pss_growth"] == pytest.approx(
        report["memory"][1]["peak_pss_total_mb"] / report["memory"][0]["peak_pss_total_mb"]
    )
    assert {run["which"] for run in report["speed"]} == {"vitzoo", "timm"}
    assert report["ratio"] == pytest.approx(report["median_img_per_s"]["vitzoo"] / report["median_img_per_s"]["timm"])
    assert "(goal >= 1.0)" in proc.stdout and "load" in proc.stdout
    assert len(list((tmp_path / "photos").glob("*/*.jpg"))) == 500  # --dir is kept
