"""benchmarks/tome_speed.py end to end on a small model: merged views timed beside the model, the
tokens left and how far the outputs moved reported, the JSON written."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("skimage", reason="scikit-image (a dev dependency) ships the photos")


def test_tome_speed_runs_end_to_end(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("tome_speed")
    out = tmp_path / "tome.json"
    report = bench.main(["--model", "vit_ti16", "--batch", "2", "--rates", "8", "--rounds", "1", "--json", str(out)])
    base, merged = report["rows"]
    assert (base["r"], base["tokens_left"], base["speedup"], base["cosine"]) == ("r=0", 197, 1.0, pytest.approx(1.0))
    assert merged["r"] == "r=8" and merged["tokens_left"] == 197 - 8 * 12 and merged["img_per_s"] > 0
    assert -1.0 <= merged["cosine"] < 1.0
    assert json.loads(out.read_text())["model"] == "vit_ti16" and "r=8" in capsys.readouterr().out
