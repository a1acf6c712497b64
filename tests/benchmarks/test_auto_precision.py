"""benchmarks/auto_precision.py end to end on a tiny model: both races run, what auto picked is
one of the two with its reason, and auto's ratio to the faster precision is reported."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("auto_precision")


def test_benchmark_runs_end_to_end(bench, tmp_path, capsys, probe_timer) -> None:
    out = tmp_path / "auto.json"
    threads = torch.get_num_threads()
    try:
        bench.main(["--model", "vit_mnist_tiny", "--batch", "2", "--rounds", "1", "--threads", "1", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    report = json.loads(out.read_text())
    assert report["cpu"] and report["model"] == "vit_mnist_tiny" and report["batch"] == 2
    for work in ("inference", "training"):
        r = report[work]
        img = r["img_per_s"]
        assert set(img) == {"fp32", "bf16"} and all(v > 0 for v in img.values())
        assert r["auto"] in img and r["why"] and r["faster"] == max(img, key=img.__getitem__)
        assert r["auto_over_faster"] == pytest.approx(img[r["auto"]] / max(img.values()))
    printed = capsys.readouterr().out
    assert report["cpu"] in printed and "the faster" in printed and "why: " in printed


def test_bad_arguments_exit_with_a_message(bench, capsys) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--rounds", "0"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err
