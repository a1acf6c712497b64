"""Every bf16 path a user reaches from the command line, on whichever CPU runs the suite: on one with
bf16 units (AMX, AVX512-BF16) they run natively, on an AVX2-only one (CI runs this file a second
time as one, under ONEDNN_MAX_CPU_ISA=AVX2 and ATEN_CPU_CAPABILITY=avx2) emulated, with a warning.
Either way each gives what fp32 gives, to bf16's precision."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import vitzoo
from vitzoo import precision, precision_probe
from vitzoo.probe import load_features

from .helpers import run
from .training import finetune


@pytest.fixture
def tiny_weights(tmp_path: Path, one_thread: None) -> str:
    torch.manual_seed(0)
    vitzoo.save_pretrained(vitzoo.create("vit_mnist_tiny"), tmp_path / "w")
    return str(tmp_path / "w")


@pytest.fixture
def say_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulation warning is said once per process: each test starts a fresh 'process'."""
    monkeypatch.setattr(precision, "_warned_emulated", threading.Event())


def emulation_said(err: str) -> bool:
    """Whether stderr holds the one-line warning that bf16 is emulated (on a CPU without bf16 units)."""
    return "vitzoo: warning: bf16 is emulated here, slower than fp32" in err


def test_from_pretrained_in_bf16_agrees_with_fp32(tiny_weights: str, say_again: None) -> None:
    fp32 = vitzoo.from_pretrained(tiny_weights).eval()
    emulated = not precision.native_bf16_flags()
    with pytest.warns(precision.EmulatedPrecisionWarning) if emulated else contextlib.nullcontext():
        bf16 = vitzoo.from_pretrained(tiny_weights, dtype="bf16").eval()
    x = torch.randn(4, *fp32.pretrained_cfg.input_size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        a, b = fp32(x), bf16(x)
    assert b.dtype == torch.bfloat16 and float((a - b.float()).abs().max() / a.abs().max()) < 0.05


def test_features_and_eval_in_bf16(capsys, tmp_path: Path, tiny_weights: str, say_again: None) -> None:
    features = {}
    for dtype in ("fp32", "bf16"):
        out = tmp_path / f"{dtype}.safetensors"
        argv = ["features", "vit_mnist_tiny", "mnist-sample", "--weights", tiny_weights, "--out", str(out)]
        code, _, err = run(capsys, *argv, "--split", "val", "--dtype", dtype, "--no-progress", "--no-optimize")
        assert code == 0, err
        assert emulation_said(err) == (dtype == "bf16" and not precision.native_bf16_flags())
        features[dtype] = load_features(out)
    assert features["bf16"].settings["dtype"] == "bf16"
    a, b = features["fp32"].features, features["bf16"].features.float()
    assert float((a - b).norm() / a.norm()) < 0.03
    accuracy = {}
    for dtype in ("fp32", "bf16"):
        argv = ["eval", "vit_mnist_tiny", "--weights", tiny_weights, "--data", "mnist-sample", "--json"]
        code, out, err = run(capsys, *argv, "--dtype", dtype, "--no-optimize")
        assert code == 0, err
        accuracy[dtype] = json.loads(out)["accuracy"]
    assert abs(accuracy["bf16"] - accuracy["fp32"]) <= 0.02  # 1,000 digits: a borderline flip or a few


def test_segment_in_bf16(capsys, tmp_path: Path, digit_scenes: Path, tiny_weights: str) -> None:
    fast = ("--crop", "32", "--steps", "5", "--batch-size", "4", "--threads", "1", "--no-progress", "--json")
    metrics = {}
    for dtype in ("fp32", "bf16"):
        argv = ["segment", "vit_mnist_tiny", str(digit_scenes), "--weights", tiny_weights]
        code, out, err = run(capsys, *argv, "--out", str(tmp_path / dtype), *fast, "--dtype", dtype, "--no-optimize")
        assert code == 0, err
        metrics[dtype] = json.loads(out)
    assert 0 <= metrics["bf16"]["miou"] <= 1
    assert abs(metrics["bf16"]["pixel_accuracy"] - metrics["fp32"]["pixel_accuracy"]) < 0.1


def test_export_onnx_in_bf16(capsys, tmp_path: Path) -> None:
    """Written on any CPU (onnxruntime's CPU provider runs no bf16 Conv on any CPU: the file is for
    runtimes that do; torch.export and OpenVINO in bf16 are run in tests/test_deploy.py)."""
    onnx = pytest.importorskip("onnx")
    out = tmp_path / "mnist.onnx"
    code, _, err = run(capsys, "export", "vit_mnist_tiny", "--out", str(out), "--dtype", "bf16")
    assert code == 0, err
    onnx.checker.check_model(str(out))
    graph = onnx.load(str(out)).graph
    assert {t.data_type for t in graph.initializer if t.dims and len(t.dims) == 2} == {onnx.TensorProto.BFLOAT16}


def test_finetune_with_amp_bf16(tiny_models: None, mnist_dir: Path, tmp_path: Path, capsys, say_again: None) -> None:
    out = tmp_path / "run"
    args = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download", "--epochs", "1", "--batch-size", "64")
    assert finetune("test_tiny_vit", *args, "--amp", "bf16", "--out", str(out), "--no-progress") == 0
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["bf16"] is True
    assert ("emulated" in run_json["precision"]) == (not precision.native_bf16_flags())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records and all(np.isfinite(r["train_loss"]) for r in records if "train_loss" in r)


@pytest.fixture
def native_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU whose flags say it multiplies bf16 matrices natively (whatever runs the suite)."""
    from vitzoo.train import placement

    monkeypatch.setattr(precision, "native_bf16_flags", lambda: ("avx512_bf16",))
    monkeypatch.setattr(placement, "native_bf16_flags", lambda: ("avx512_bf16",))


@pytest.mark.parametrize("speedup, picked", [(0.56, "fp32"), (2.0, "bf16")])
def test_eval_dtype_auto_follows_the_probe(
    capsys, tiny_weights: str, probe_timer, native_flags: None, speedup: float, picked: str
) -> None:
    probe_timer.set(inference=speedup, training=1 / speedup)  # training's answer is not the one asked
    argv = ["eval", "vit_mnist_tiny", "--weights", tiny_weights, "--data", "mnist-sample", "--json", "--no-optimize"]
    code, out, err = run(capsys, *argv, "--dtype", "auto")
    assert code == 0, err
    said = f"vitzoo: evaluating in {picked}: this CPU multiplies bf16 matrices natively (avx512_bf16), "
    assert (
        f"{said}{'and' if picked == 'bf16' else 'but'} bf16 ran at {speedup:.2f}x fp32's speed here for inference ("
        in err
    )
    assert json.loads(out)["accuracy"] >= 0
    code, _, err = run(capsys, *argv, "--dtype", "auto")  # a second run: remembered, nothing timed
    assert code == 0 and "measured before, remembered in" in err
    assert len(probe_timer.calls) == 2 * (1 + precision_probe.MIN_ROUNDS)  # one probe: warm-ups, the fewest rounds


def test_auto_on_this_cpu_probes_only_where_bf16_is_native(capsys, tiny_weights: str, probe_timer) -> None:
    """The real flags: on an AVX2-only CPU (CI's second run, ONEDNN_MAX_CPU_ISA=AVX2) `auto` keeps
    fp32 and says bf16 would be emulated, timing nothing; with bf16 units it asks the probe."""
    native = bool(precision.native_bf16_flags())
    if not native:
        probe_timer.forbid()
    argv = ["eval", "vit_mnist_tiny", "--weights", tiny_weights, "--data", "mnist-sample", "--json", "--no-optimize"]
    code, _, err = run(capsys, *argv, "--dtype", "auto")
    assert code == 0, err
    assert ("bf16 would be emulated, slower than fp32" in err) == (not native)
    assert ("fp32's speed here for inference" in err) == native


def test_a_bad_vitzoo_precision_is_one_error_line(capsys, tiny_weights: str, probe_timer, native_flags, monkeypatch):
    monkeypatch.setenv("VITZOO_PRECISION", "fastest")
    argv = ["eval", "vit_mnist_tiny", "--weights", tiny_weights, "--data", "mnist-sample", "--no-optimize"]
    code, out, err = run(capsys, *argv, "--dtype", "auto")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("vitzoo: error: VITZOO_PRECISION='fastest' is invalid; expected fp32 or bf16")


def test_finetune_amp_auto_follows_the_training_probe(
    tiny_models: None, mnist_dir: Path, tmp_path: Path, probe_timer, native_flags: None
) -> None:
    probe_timer.set(inference=2.0, training=0.62)  # bf16 inference faster, bf16 training slower
    out = tmp_path / "run"
    args = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download", "--epochs", "1", "--batch-size", "64")
    assert finetune("test_tiny_vit", *args, "--amp", "auto", "--out", str(out), "--no-progress") == 0
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["bf16"] is False
    assert "but bf16 ran at 0.62x fp32's speed here for training" in run_json["precision"]
