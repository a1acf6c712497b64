"""`--int8 --calibration DIR` on `vitzoo export` (an int8 OpenVINO IR or ONNX file, reloaded here by
OpenVINO and ONNX Runtime), `predict`, `features` and `eval`, with a model trained here on the
embedded MNIST sample; refusals in one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo.data import eval_transform, load_mnist_sample
from vitzoo.inference import candidates, int8, timing

from .helpers import run

for _module in ("openvino", "nncf", "onnxruntime"):  # the int8 extra; an old one may fail on import with more
    try:
        __import__(_module)
    except Exception as _exc:
        pytest.skip(f"{_module} does not import here ({type(_exc).__name__}: {_exc})", allow_module_level=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """vit_mnist trained briefly on the sample (two epochs: about 84% of the test digits; saved), 48
    calibration digits and 16 other digits as PNG folders."""
    root = tmp_path_factory.mktemp("int8")
    sample = load_mnist_sample()
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    transform = eval_transform(model)
    x = torch.stack([transform(Image.fromarray(img[0].numpy())) for img in sample.train.images])
    for _ in range(2):
        for batch, labels in zip(x.split(64), sample.train.labels.split(64)):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(batch), labels).backward()
            optimizer.step()
    model.eval().save_pretrained(root / "weights")
    for folder, images in (("calibration", sample.val.images[:48]), ("photos", sample.val.images[48:64])):
        (root / folder).mkdir()
        for i, img in enumerate(images):
            Image.fromarray(img[0].numpy()).save(root / folder / f"{i:03d}.png")
    return root / "weights", root / "calibration", root / "photos"


@pytest.fixture(autouse=True)
def openvino_int8_only(monkeypatch, tmp_path):
    """The int8 runs quantize through OpenVINO alone (PT2E compiles for tens of seconds: its own test)."""
    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(timing, "ROUND_S", 0.005)
    monkeypatch.setattr(candidates, "candidate_names", lambda device="cpu": ["eager", "openvino-int8"])


def _float_and_inputs(weights: Path, photos: Path) -> tuple[torch.nn.Module, torch.Tensor]:
    model = vitzoo.from_pretrained(weights).eval()
    transform = eval_transform(model)
    return model, torch.stack([transform(Image.open(p)) for p in sorted(photos.iterdir())])


@pytest.mark.parametrize("suffix", [pytest.param(".xml", marks=pytest.mark.slow), ".onnx"])  # .xml: seconds more
def test_export_int8_writes_a_file_its_runtime_reloads_with_the_models_answers(trained, tmp_path, capsys, suffix):
    weights, calibration, photos = trained
    out = tmp_path / f"int8{suffix}"
    argv = ["export", "vit_mnist", "--weights", str(weights), "--out", str(out), "--int8"]
    code, stdout, err = run(capsys, *argv, "--calibration", str(calibration), "--json")
    if suffix == ".onnx" and code == 1 and "no int8 ONNX model kept the answers, nothing written" in err:
        import onnxruntime

        assert not out.exists()  # the guard refused it: what older ONNX Runtimes' quantization gives here
        pytest.skip(f"onnxruntime {onnxruntime.__version__}'s static quantization did not keep the answers here")
    assert code == 0, err
    data = json.loads(stdout)
    assert data["dtype"] == "int8" and data["int8"]["check"]["passed"] and data["int8"]["check"]["held_out"] == 12
    model, x = _float_and_inputs(weights, photos)
    if suffix == ".xml":
        import openvino

        compiled = openvino.Core().compile_model(str(out), "CPU")
        got = torch.from_numpy(compiled(x.numpy())[0])
        ops = {op.get_type_name() for op in openvino.Core().read_model(str(out)).get_ops()}
        assert "FakeQuantize" in ops or "FakeConvert" in ops  # quantized, not the float graph
    else:
        import onnx
        import onnxruntime

        session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        got = torch.from_numpy(session.run(None, {"image": x.numpy()})[0])
        assert "QuantizeLinear" in {n.op_type for n in onnx.load(str(out)).graph.node}
    with torch.inference_mode():
        want = model(x)
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.9  # 16 digits it was not calibrated on


def test_predict_runs_in_int8(trained, tmp_path, capsys):
    weights, calibration, photos = trained
    out = tmp_path / "predictions.csv"
    images = [str(p) for p in sorted(photos.iterdir())]
    argv = ["predict", "vit_mnist", *images, "--weights", str(weights), "--output", str(out), "--json"]
    code, stdout, err = run(capsys, *argv, "--int8", "--calibration", str(calibration))
    assert code == 0, err
    assert json.loads(stdout)["optimize"]["choice"] == "openvino-int8" and out.exists()
    assert "answers held" in err


@pytest.mark.slow  # two evaluations and a features run, each quantizing: tens of seconds
def test_eval_and_features_run_in_int8(trained, tmp_path, capsys, mnist_dir):
    weights, calibration, _ = trained
    int8_args = ("--int8", "--calibration", str(calibration))
    data = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download", "--json")
    code, stdout, err = run(capsys, "eval", "vit_mnist", "--weights", str(weights), *data, *int8_args)
    assert code == 0, err
    quantized = json.loads(stdout)
    code, stdout, err = run(capsys, "eval", "vit_mnist", "--weights", str(weights), *data, "--no-optimize")
    floating = json.loads(stdout)
    assert quantized["optimize"]["choice"] == "openvino-int8"
    assert abs(quantized["accuracy"] - floating["accuracy"]) <= 0.03  # 200 digits
    feats = tmp_path / "features.safetensors"
    code, _, err = run(
        capsys, "features", "vit_mnist", "mnist", "--data-dir", str(mnist_dir), "--no-download",
        "--weights", str(weights), "--out", str(feats), "--split", "val", *int8_args,
    )  # fmt: skip
    assert code == 0 and feats.exists(), err


def _changes_answers(model, x, images):
    return [("", lambda inp: model(inp).flip(-1))]


def test_answers_that_change_are_refused_in_one_line_with_nothing_written(trained, tmp_path, capsys, monkeypatch):
    weights, calibration, photos = trained
    monkeypatch.setattr(int8, "settings", lambda name: [("broken", _changes_answers)])
    out = tmp_path / "predictions.csv"
    images = [str(p) for p in sorted(photos.iterdir())]
    argv = ["predict", "vit_mnist", *images, "--weights", str(weights), "--output", str(out)]
    code, _, err = run(capsys, *argv, "--int8", "--calibration", str(calibration))
    assert code == 1 and err.count("vitzoo: error:") == 1 and not out.exists()
    assert "--int8: the int8 model's answers changed (openvino-int8, broken: top-1 agreement" in err


def test_an_export_whose_answers_change_writes_nothing(trained, tmp_path, capsys, monkeypatch):
    from vitzoo.inference import guard

    weights, calibration, _ = trained
    from vitzoo.inference.backends import openvino_int8

    monkeypatch.setattr(guard.Bounds, "__post_init__", lambda self: None)  # a bound no int8 model can meet
    monkeypatch.setattr("vitzoo.commands.int8_args.AGREEMENT", 1.01)
    monkeypatch.setattr(openvino_int8, "SETTINGS", openvino_int8.SETTINGS[:2])  # two settings are enough here
    out = tmp_path / "int8.xml"
    argv = ["export", "vit_mnist", "--weights", str(weights), "--out", str(out), "--int8"]
    code, _, err = run(capsys, *argv, "--calibration", str(calibration))
    assert code == 1 and "no int8 OpenVINO model kept the answers, nothing written" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "extra, code, message",
    [
        (["--int8"], 2, "--int8 needs --calibration DIR"),
        (["--calibration", "x"], 2, "--calibration apply to --int8"),
        (["--int8", "--calibration", "x", "--agreement", "0"], 2, "--agreement: expected"),
        (["--int8", "--calibration", "x", "--agreement", "1.5"], 2, "--agreement: expected"),
        (["--int8", "--calibration", "{missing}"], 1, "--calibration '{missing}' does not exist"),
        (["--int8", "--calibration", "{empty}"], 1, "holds no image files"),
        (["--int8", "--calibration", "{few}"], 1, "calibration holds 3 images; expected at least 16"),
        (["--int8", "--calibration", "{broken}"], 1, "--calibration: cannot read image"),
    ],
)
def test_bad_int8_options_are_one_line_and_write_nothing(trained, tmp_path, capsys, extra, code, message):
    weights, calibration, _ = trained
    folders = {"missing": tmp_path / "missing", "empty": tmp_path / "empty", "few": tmp_path / "few"}
    folders["empty"].mkdir()
    folders["few"].mkdir()
    for i, p in enumerate(sorted(calibration.iterdir())[:3]):
        (folders["few"] / f"{i}.png").write_bytes(p.read_bytes())
    folders["broken"] = tmp_path / "broken"
    folders["broken"].mkdir()
    for p in sorted(calibration.iterdir()):
        (folders["broken"] / p.name).write_bytes(p.read_bytes())
    (folders["broken"] / "999.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    extra = [a.format(**{k: str(v) for k, v in folders.items()}) for a in extra]
    message = message.format(**{k: str(v) for k, v in folders.items()})
    out = tmp_path / "model.xml"
    got, _, err = run(capsys, "export", "vit_mnist", "--weights", str(weights), "--out", str(out), *extra)
    assert got == code and message in err and err.count("error:") == 1, err
    assert not out.exists()


def test_int8_export_needs_an_int8_format_and_a_fixed_size(trained, tmp_path, capsys):
    weights, calibration, _ = trained
    for out, extra in ((tmp_path / "m.pt2", []), (tmp_path / "m.onnx", ["--dynamic-size"])):
        argv = ["export", "vit_mnist", "--weights", str(weights), "--out", str(out), *extra]
        code, _, err = run(capsys, *argv, "--int8", "--calibration", str(calibration))
        assert code == 2 and "--int8 writes an OpenVINO IR (.xml) or an ONNX file (.onnx) of a fixed size" in err
