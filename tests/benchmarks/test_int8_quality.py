"""benchmarks/int8_quality.py end to end on a tiny run: vit_mnist trained for one epoch on a few
sample digits, quantized through OpenVINO, merged at two rates; the JSON holds every field with
plausible values, and the table and plot are written."""

from __future__ import annotations

import json

import pytest
import torch

for _module in ("openvino", "nncf"):  # the int8 extra; an old one may fail on import with more than ImportError
    try:
        __import__(_module)
    except Exception as _exc:
        pytest.skip(f"{_module} does not import here ({type(_exc).__name__}: {_exc})", allow_module_level=True)


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("int8_quality")


def _fraction(value: float) -> bool:
    return 0.0 <= value <= 1.0


@pytest.mark.slow  # a benchmark end to end (the README's second line)
def test_benchmark_runs_end_to_end(bench, tmp_path, capsys, monkeypatch, png_size) -> None:
    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "cache"))
    out, picture = tmp_path / "int8.json", tmp_path / "tome.png"
    threads = torch.get_num_threads()
    try:
        bench.main(
            [
                *("--datasets", "mnist-sample", "--train-images", "128", "--epochs", "1", "--test-images", "80"),
                *("--batch", "32", "--calibration", "32", "--tome", "1", "2", "--rounds", "1", "--calls", "1"),
                *("--agreement", "0", "--max-drop", "1", "--threads", "1", "--quiet"),
                *("--runs", str(tmp_path / "runs"), "--json", str(out)),
                *(("--plot", str(picture)) if _has_matplotlib() else ()),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    report = json.loads(out.read_text())
    assert not list(tmp_path.glob("*.tmp"))
    assert report["conditions"]["cpu"] and report["conditions"]["openvino"] and report["goal_drop_points"] == 0.3
    (r,) = report["results"]
    assert (r["dataset"], r["test_images"], r["batch"], r["calibration_images"]) == ("mnist-sample", 80, 32, 32)
    assert r["training"]["source"] == "trained" and r["training"]["train_images"] == 128
    assert r["training"]["epochs"] == 1 and (tmp_path / "runs" / "mnist-sample" / "best").is_dir()
    assert _fraction(r["fp32"]["accuracy"])
    q = r["int8"]["openvino-int8"]
    assert set(r["int8"]) == {"openvino-int8"} and r["tome_int8"] == []
    assert q["chosen"] == "openvino-int8" and q["setting"] and q["check"]["passed"]  # bounds of 0: the first holds
    assert q["check"]["held_out"] == 8 and q["check"]["kind"] == "classifier"
    assert _fraction(q["accuracy"]) and _fraction(q["agreement"])
    assert q["drop_points"] == pytest.approx(100 * (r["fp32"]["accuracy"] - q["accuracy"]))
    assert q["goal_met"] == (q["drop_points"] <= 0.3)
    rows = r["tome"]
    assert [row["r"] for row in rows] == [0, 1, 2]
    assert [row["tokens"] for row in rows] == [[16], [16, 15, 14, 13, 12], [16, 14, 12, 10, 8]]  # 4 blocks
    assert [row["tokens_left"] for row in rows] == [16, 12, 8]
    assert rows[0]["speed_ratio"] == 1.0 and rows[0]["agreement"] == 1.0 and rows[0]["drop_points"] == 0.0
    for row in rows:
        assert _fraction(row["accuracy"]) and _fraction(row["agreement"]) and row["img_per_s"] > 0
    printed = capsys.readouterr().out
    assert "vit_mnist on mnist-sample: trained on 128 images, 1 epochs" in printed and "openvino-int8" in printed
    assert "tokens per block" in printed and "16-14-12-10-8" in printed
    if _has_matplotlib():
        assert png_size(picture) == (640, 400)  # 6.4 x 4 inches at 100 dpi


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epochs", "0"], "--epochs must be at least 1, got 0"),
        (["--calibration", "8"], "--calibration must be at least 16"),
        (["--tome", "0"], "--tome rates must be at least 1"),
        (["--weights", "mnist=runs/x"], "--weights 'mnist=runs/x': expected DATASET=DIR"),
    ],
)
def test_bad_arguments_exit_with_a_message(bench, capsys, argv, message) -> None:
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert message in capsys.readouterr().err
