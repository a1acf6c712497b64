"""benchmarks/int8_speed.py end to end on a small model: the three contestants built, timed and
compared, the choice and its check reported, the JSON written."""

from __future__ import annotations

import json

import pytest

for _module in ("openvino", "nncf", "skimage"):
    try:
        __import__(_module)
    except Exception as _exc:
        pytest.skip(f"{_module} does not import here ({type(_exc).__name__}: {_exc})", allow_module_level=True)


@pytest.mark.slow  # three OpenVINO conversions and an NNCF quantization: tens of seconds
def test_int8_speed_runs_end_to_end(load_benchmark, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "cache"))
    bench = load_benchmark("int8_speed")
    out = tmp_path / "int8.json"
    argv = ["--models", "vit_ti16", "--batches", "2", "--rounds", "1", "--no-pt2e", "--calibration", "16", "--few"]
    report = bench.main([*argv, "--json", str(out)])
    (row,) = report["rows"]
    assert set(row["img_per_s"]) == {"vitzoo.optimize", "nncf int8", "openvino fp32"}
    assert all(v > 0 for v in row["img_per_s"].values())
    assert row["vs_nncf"] == pytest.approx(row["img_per_s"]["vitzoo.optimize"] / row["img_per_s"]["nncf int8"])
    assert row["choice"] == "openvino-int8" and row["check"]["held_out"] == 4  # int8=True: the int8 path, checked
    assert json.loads(out.read_text())["rows"][0]["model"] == "vit_ti16"
    assert "vit_ti16" in capsys.readouterr().out
