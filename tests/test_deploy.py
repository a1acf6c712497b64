"""Deployment exports (vitzoo/deploy.py and `vitzoo export`): the ONNX file, run in onnxruntime, and
the torch.export program, loaded back, give PyTorch's outputs for a plain ViT, a DeiT with its
distillation token and a hybrid (conv-stem) ViT, at batch sizes other than the traced one; the
OpenVINO IR, run in OpenVINO's CPU runtime, for a plain ViT, a RoPE model and a bf16 hybrid."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import vitzoo
from vitzoo import cli, deploy
from vitzoo.model import VisionTransformer

TINY = {"img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 2, "num_heads": 3, "num_classes": 7}
BATCHES = (1, 3, 8)  # the exporters trace a batch of 2: other sizes go through the dynamic axis
NEEDS_DIM = pytest.mark.skipif(
    not hasattr(torch.export, "Dim"),
    reason=f"torch {torch.__version__} has no torch.export.Dim (dynamic_shapes come with torch 2.2)",
)
DYNAMO_ONNX = deploy._torch_at_least(2, 9)


def tiny_models() -> dict[str, VisionTransformer]:
    """Three tiny models with every parameter and statistic random, so no part of the graph is an
    identity that a wrong export could get right by accident."""
    torch.manual_seed(0)
    models = {
        "vit": vitzoo.create("vit_ti16", **TINY),
        "deit_distilled": vitzoo.create("deit_ti16_distilled", **TINY),
        "hybrid": vitzoo.create("vit_mnist"),  # conv stem with BatchNorm, average pooling
    }
    with torch.no_grad():
        for model in models.values():
            for name, tensor in model.named_parameters():
                if "pos_embed" in name or "token" in name:
                    tensor.normal_(std=0.5)
            for module in model.modules():
                if isinstance(module, nn.BatchNorm2d):
                    module.running_mean.normal_()
                    module.running_var.uniform_(0.5, 2.0)
    return models


def images(model: nn.Module, batch: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, *model.pretrained_cfg.input_size, generator=torch.Generator().manual_seed(seed))


def reference(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model(x)
    model.train(was_training)
    assert isinstance(out, torch.Tensor)
    return out


@pytest.fixture(scope="module")
def ort():
    return pytest.importorskip("onnxruntime", reason='onnxruntime is the [onnx] extra: pip install "vitzoo[onnx]"')


OPSETS = {"vit": 17}  # one model at a chosen opset (test_onnx_opset), the others at the exporter's own


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, tuple[VisionTransformer, Path]]:
    """Each model exported to ONNX once, from training mode (the export must trace eval mode)."""
    out = tmp_path_factory.mktemp("onnx")
    result = {}
    for name, model in tiny_models().items():
        model.train()
        path = deploy.export_onnx(model, out / f"{name}.onnx", opset=OPSETS.get(name))
        assert model.training, "export_onnx must give the model back in the mode it had"
        result[name] = (model, path)
    return result


# ------------------------------------------------------------------------------------ ONNX
@pytest.mark.parametrize("name", ["vit", "deit_distilled", "hybrid"])
def test_onnx_matches_pytorch_at_every_batch_size(name, exported, ort):
    model, path = exported[name]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, out.name) == ("image", "output")
    assert isinstance(inp.shape[0], str) and inp.shape[1:] == list(model.pretrained_cfg.input_size)
    for batch in BATCHES:
        x = images(model, batch)
        (got,) = session.run(None, {"image": x.numpy()})
        expected = reference(model, x)
        assert got.shape == tuple(expected.shape)
        np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-4)


@pytest.mark.skipif(not DYNAMO_ONNX, reason=f"torch {torch.__version__}: dynamic-size ONNX needs torch >= 2.9")
def test_onnx_of_a_rope_model_follows_batch_height_and_width(tmp_path, ort):
    """EVA-02's layout: rotary embedding (rescaled to a reference grid) beside a learned table, both
    computed in the graph from the input's size; two sizes other than the traced one, and batches."""
    torch.manual_seed(0)
    model = VisionTransformer(
        **{**TINY, "num_heads": 2, "depth": 1},
        rope="cat",
        rope_ref_feat_shape=(3, 3),
        reg_tokens=1,
        dynamic_img_size=True,
    )
    with torch.no_grad():
        model.pos_embed.normal_(std=0.5)
    path = deploy.export_onnx(model, tmp_path / "rope.onnx", dynamic_size=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    assert all(isinstance(d, str) for d in (inp.shape[0], inp.shape[2], inp.shape[3]))  # batch, height, width
    for batch, h, w in [(1, 48, 64), (3, 24, 40)]:
        x = torch.randn(batch, 3, h, w, generator=torch.Generator().manual_seed(h))
        (got,) = session.run(None, {"image": x.numpy()})
        np.testing.assert_allclose(got, reference(model, x).numpy(), rtol=0, atol=1e-4)


def test_dynamic_size_needs_a_dynamic_model(tmp_path):
    with pytest.raises(ValueError, match="needs a model built with dynamic_img_size=True"):
        deploy.export_onnx(vitzoo.create("vit_ti16", **TINY), tmp_path / "x.onnx", dynamic_size=True)
    assert not (tmp_path / "x.onnx").exists()


def test_onnx_of_a_distilled_deit_is_the_average_of_its_two_heads(exported, ort):
    model, path = exported["deit_distilled"]
    x = images(model, 3)
    (got,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": x.numpy()})
    with torch.no_grad():
        tokens = model.eval().forward_features(x)
        both = (model.head(tokens[:, 0]) + model.head_dist(tokens[:, 1])) / 2
        model.train()
    np.testing.assert_allclose(got, both.numpy(), rtol=0, atol=1e-4)


def cpu_runs_fp16_convolutions() -> bool:
    try:
        torch.nn.functional.conv2d(torch.ones(1, 1, 2, 2, dtype=torch.half), torch.ones(1, 1, 1, 1, dtype=torch.half))
    except RuntimeError:
        return False
    return True


@pytest.mark.skipif(
    not cpu_runs_fp16_convolutions(),
    reason=f"torch {torch.__version__} has no fp16 convolution on the CPU, and exporting runs the model",
)
def test_onnx_in_fp16_takes_float32_images(tmp_path, ort):
    model = tiny_models()["vit"].eval()
    x = images(model, 3)
    expected = reference(model, x)
    path = deploy.export_onnx(model.to(torch.float16), tmp_path / "half.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(float)"
    (got,) = session.run(None, {"image": x.numpy()})
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), expected.numpy(), rtol=0, atol=2e-2)


def test_onnx_opset(tmp_path, exported):
    onnx = pytest.importorskip("onnx", reason='onnx is the [onnx] extra: pip install "vitzoo[onnx]"')
    _, path = exported["vit"]  # exported with opset=17 (and run in onnxruntime by the tests above)
    assert {o.domain: o.version for o in onnx.load(str(path)).opset_import}[""] == OPSETS["vit"] == 17
    model = vitzoo.create("vit_mnist_tiny")
    if DYNAMO_ONNX:  # below what it implements, this exporter converts down, and may not manage
        with pytest.raises(ValueError, match=r"opset=14 is not available for this model .*wrote opset 18"):
            deploy.export_onnx(model, tmp_path / "old.onnx", opset=14)
        assert not (tmp_path / "old.onnx").exists()
    for bad in (0, -3, True, "17"):
        with pytest.raises(ValueError, match=r"opset=.*expected a positive int"):
            deploy.export_onnx(model, tmp_path / "bad.onnx", opset=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "bad.onnx").exists()


@pytest.mark.skipif(not DYNAMO_ONNX, reason=f"torch {torch.__version__} exports ONNX by tracing, without onnxscript")
def test_onnx_without_the_extra_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # what `import onnxscript` sees when it is absent
    with pytest.raises(ImportError, match=r'needs onnxscript.*pip install "vitzoo\[onnx\]"'):
        deploy.export_onnx(vitzoo.create("vit_mnist_tiny"), tmp_path / "m.onnx")
    assert list(tmp_path.iterdir()) == []


def test_onnx_size_limit_and_unknown_input_size(tmp_path, monkeypatch):
    monkeypatch.setattr(deploy, "ONNX_MAX_BYTES", 1000)
    with pytest.raises(ValueError, match=r"GiB; an ONNX file holds at most 2 GiB.*torch.export program"):
        deploy.export_onnx(vitzoo.create("vit_mnist_tiny"), tmp_path / "m.onnx")
    monkeypatch.undo()
    plain = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))
    with pytest.raises(ValueError, match=r"Sequential carries no pretrained_cfg.*pass input_size"):
        deploy.export_onnx(plain, tmp_path / "m.onnx")
    with pytest.raises(ValueError, match=r"input_size=\(3, 2\) is invalid; expected \(channels, height, width\)"):
        deploy.export_onnx(plain, tmp_path / "m.onnx", input_size=(3, 2))
    assert list(tmp_path.iterdir()) == []


def test_bad_destination_fails_before_exporting(tmp_path):
    model = vitzoo.create("vit_mnist_tiny")
    with pytest.raises(IsADirectoryError, match=r"it is a directory; expected a file name"):
        deploy.export_onnx(model, tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match=r"cannot write .*file/m\.onnx"):
        deploy.export_onnx(model, tmp_path / "file" / "m.onnx")


def test_format_from_suffix_or_name():
    assert deploy.format_of("a/m.onnx") == "onnx" and deploy.format_of("m.PT2") == "torch-export"
    assert deploy.format_of("model.bin", "onnx") == "onnx"
    with pytest.raises(ValueError, match=r"cannot tell the export format from 'm\.bin'.*\.onnx or \.pt2"):
        deploy.format_of("m.bin")
    with pytest.raises(ValueError, match=r"format 'tflite' is unknown; expected one of onnx, torch-export"):
        deploy.format_of("m.bin", "tflite")
    with pytest.raises(ValueError, match=r"ends in \.pt2, the suffix of 'torch-export' files, but the format is"):
        deploy.format_of("m.pt2", "onnx")
    assert deploy.format_of("ir/m.XML") == "openvino" == deploy.format_of("m.xml", "openvino")
    with pytest.raises(ValueError, match=r"ends in \.xml, the suffix of 'openvino' files, but the format is 'onnx'"):
        deploy.format_of("m.xml", "onnx")
    with pytest.raises(ValueError, match=r"'m\.bin' does not end in \.xml; an OpenVINO IR is an \.xml file"):
        deploy.format_of("m.bin", "openvino")


# ------------------------------------------------------------------------------------ torch.export
@NEEDS_DIM
@pytest.mark.parametrize("name", ["deit_distilled", "hybrid"])
def test_program_round_trip(name, tmp_path):
    model = tiny_models()[name].train()
    path = deploy.export_program(model, tmp_path / f"{name}.pt2")
    assert model.training
    loaded = deploy.load_program(path)
    for batch in BATCHES:
        x = images(model, batch)
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), reference(model, x), rtol=0, atol=1e-5)


@pytest.mark.skipif(hasattr(torch.export, "Dim"), reason="this torch has torch.export.Dim")
def test_program_on_an_old_torch_is_one_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match=r"needs torch >= 2\.2 .*Export ONNX instead"):
        deploy.export_program(vitzoo.create("vit_mnist_tiny"), tmp_path / "m.pt2")


def test_load_program_of_a_missing_or_foreign_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no torch.export program at .*nothing\.pt2"):
        deploy.load_program(tmp_path / "nothing.pt2")
    (tmp_path / "junk.pt2").write_bytes(b"not a program")
    with pytest.raises(ValueError, match=r"junk\.pt2' is not a torch.export program"):
        deploy.load_program(tmp_path / "junk.pt2")


# torch 2.14 deprecates torch.jit.trace (for torch.export) but runs it; the tracer warns about the
# input-shape check that the trace fixes, as it should.
@pytest.mark.filterwarnings("ignore:`torch.jit.trace:FutureWarning", "ignore::torch.jit.TracerWarning")
def test_torch_jit_trace_works_for_any_batch_size():
    """The README says tracing works too (torch.jit.script does not)."""
    model = tiny_models()["deit_distilled"].eval()
    with torch.no_grad():
        traced = torch.jit.trace(model, images(model, 2))
        x = images(model, 5)
        torch.testing.assert_close(traced(x), model(x))


# ------------------------------------------------------------------------------------ the command
def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, VisionTransformer]:
    """vit_mnist with every weight and statistic random, saved with save_pretrained, for --weights."""
    model = tiny_models()["hybrid"].eval()
    path = tmp_path_factory.mktemp("weights") / "vit_mnist"
    model.save_pretrained(path)
    return path, model


@NEEDS_DIM
def test_export_program_command_with_dtype_and_img_size(tmp_path, capsys):
    out = tmp_path / "mnist.pt2"
    code, stdout, err = run(capsys, "export", "vit_mnist", "--out", str(out), "--dtype", "bf16", "--img-size", "32")
    assert code == 0, err
    assert "randomly initialised weights" in err  # neither --pretrained nor --weights
    assert stdout.strip() == f"wrote {out} (torch-export, bf16 weights, input 'image' float32 batchx1x32x32)"
    program = deploy.load_program(out)
    logits = program(torch.randn(3, 1, 32, 32))
    assert logits.shape == (3, 10) and logits.dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "m.pt2", "--format", "onnx"], "ends in .pt2, the suffix of 'torch-export' files"),
        (["--out", "m.bin"], "cannot tell the export format from 'm.bin'"),
        (["--out", "m.pt2", "--opset", "18"], "--opset 18 is invalid; expected a positive ONNX opset version"),
        (["--out", "m.onnx", "--opset", "0"], "--opset 0 is invalid"),
        (
            ["--out", "m.onnx", "--img-size", "0"],
            "argument --img-size: expected an int in [1, 65536] (pixels), got '0'",
        ),
        (
            ["--out", "m.onnx", "--img-size", "100000"],
            "--img-size: expected an int in [1, 65536] (pixels), got '100000'",
        ),
        (["--out", "m.onnx", "--pretrained", "--weights", "w"], "--pretrained and --weights both choose the weights"),
        (["--out", "m.onnx", "--format", "tflite"], "invalid choice: 'tflite'"),
        (["--out", "m.bin", "--format", "openvino"], "'m.bin' does not end in .xml"),
        (["--out", "m.xml", "--dynamic-size"], "--dynamic-size is not available for an OpenVINO IR"),
    ],
)
def test_export_command_bad_usage(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, stdout, err = run(capsys, "export", "vit_mnist_tiny", *argv)
    assert code == 2 and stdout == ""
    assert message in err
    assert list(tmp_path.iterdir()) == []


def test_export_command_failures_are_one_line(tmp_path, capsys, monkeypatch):
    code, _, err = run(capsys, "export", "vit_mnist_tiny", "--out", str(tmp_path), "--format", "onnx")
    assert code == 1 and err.strip().endswith("it is a directory; expected a file name")
    code, _, err = run(capsys, "export", "vit_mnist_tiny", "--out", str(tmp_path / "m.onnx"), "--img-size", "30")
    assert code == 1 and err.count("\n") == 1 and "img_size" in err
    # What this torch or this installation cannot do is said before any weights load: one line.
    if not hasattr(torch.export, "Dim"):
        code, _, err = run(capsys, "export", "vit_mnist_tiny", "--out", str(tmp_path / "m.pt2"))
        assert code == 1 and err.count("\n") == 1 and "needs torch >= 2.2" in err
    if DYNAMO_ONNX:
        monkeypatch.setitem(sys.modules, "onnxscript", None)
        code, _, err = run(capsys, "export", "vit_mnist_tiny", "--out", str(tmp_path / "m.onnx"))
        assert code == 1 and err.count("\n") == 1 and err.strip().endswith('pip install "vitzoo[onnx]"')
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_export_onnx_command_in_a_fresh_process(tmp_path, saved, ort):
    """`python -m vitzoo export` with --weights: the JSON report alone on stdout, nothing on
    stderr (no exporter chatter), and the file gives the saved model's outputs."""
    weights, model = saved
    out = tmp_path / "mnist.onnx"
    proc = subprocess.run(
        [sys.executable, "-m", "vitzoo", "export", "vit_mnist", "--weights", str(weights), "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == {
        "output": str(out),
        "format": "onnx",
        "dtype": "fp32",
        "input": ["batch", 1, 28, 28],
        "opset": None,
    }
    x = images(model, 4)
    (got,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"image": x.numpy()})
    np.testing.assert_allclose(got, reference(model, x).numpy(), rtol=0, atol=1e-4)


@pytest.mark.parametrize("suffix", [".onnx", ".pt2", ".xml"])
def test_ctrl_c_inside_the_exporter_is_an_interruption(tmp_path, capsys, monkeypatch, suffix):
    """torch's exporters catch what they trace and raise their own error from it: a Ctrl-C that
    lands inside them comes back chained under another type, and must still exit 130."""

    def interrupted(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Failed to export the model with torch.export") from exc

    try:
        deploy.check_available(deploy.format_of(f"m{suffix}"))
    except (ImportError, RuntimeError) as exc:
        pytest.skip(str(exc))
    monkeypatch.setattr(torch.onnx, "export", interrupted)
    monkeypatch.setattr(torch.export, "export", interrupted)
    if suffix == ".xml":
        monkeypatch.setattr(pytest.importorskip("openvino"), "convert_model", interrupted)
    code, out, err = run(capsys, "export", "vit_mnist_tiny", "--out", str(tmp_path / f"m{suffix}"))
    assert code == 130 and out == "" and err.endswith("vitzoo: interrupted\n") and "failed" not in err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------ OpenVINO
@pytest.fixture(scope="module")
def ov():
    return pytest.importorskip("openvino", reason='openvino is the [openvino] extra: pip install "vitzoo[openvino]"')


def rope_model() -> VisionTransformer:
    """DINOv3's layout at a tiny size (rotary positions, storage tokens, layer scale), its tokens random."""
    torch.manual_seed(0)
    model = vitzoo.create("dinov3_s16", **TINY)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if "token" in name or "gamma" in name:
                tensor.normal_(std=0.5)
    return model


def run_ir(ov, path: Path, x: torch.Tensor) -> torch.Tensor:
    """The IR's output for `x` in OpenVINO's CPU runtime at f32 (its default on a CPU with bf16 is bf16)."""
    compiled = deploy.compile_openvino(str(path), {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled(x.numpy())[0]
    if compiled.outputs[0].element_type == ov.Type.bf16:  # numpy has no bf16: OpenVINO gives its bits as fp16
        return torch.from_numpy(got.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(got)


@pytest.mark.parametrize("name", ["vit", "rope"])
def test_openvino_matches_pytorch_at_every_batch_size(name, tmp_path, ov):
    model = (tiny_models()["vit"] if name == "vit" else rope_model()).train()
    path = deploy.export(model, tmp_path / f"{name}.xml")
    assert model.training, "export_openvino must give the model back in the mode it had"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{name}.bin", f"{name}.xml"]  # no temporary left
    (inp,), (out,) = ov.Core().read_model(str(path)).inputs, ov.Core().read_model(str(path)).outputs
    assert (inp.get_names(), out.get_names()) == ({"image"}, {"output"})
    assert str(inp.get_partial_shape()) == "[?,3,32,32]" and inp.get_element_type() == ov.Type.f32
    for batch in BATCHES:
        x = images(model, batch)
        got, expected = run_ir(ov, path, x), reference(model, x)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)


def test_export_openvino_command_in_bf16(tmp_path, capsys, saved, ov):
    """bf16 weights stay bf16 in the IR (no compression): the input is float32, the output bf16."""
    weights, model = saved
    out = tmp_path / "mnist.xml"
    argv = ["export", "vit_mnist", "--weights", str(weights), "--out", str(out), "--dtype", "bf16", "--json"]
    code, stdout, err = run(capsys, *argv)
    assert code == 0, err
    assert json.loads(stdout) == {
        "output": str(out),
        "format": "openvino",
        "dtype": "bf16",
        "input": ["batch", 1, 28, 28],
        "opset": None,
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mnist.bin", "mnist.xml"]
    x = images(model, 3)
    got = run_ir(ov, out, x)
    assert got.dtype == torch.bfloat16
    expected = reference(copy.deepcopy(model).to(torch.bfloat16), x)
    torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=2e-2)


@pytest.mark.slow  # end to end in seconds: CI's -m slow pass
def test_openvino_failures_leave_nothing(tmp_path, capsys, monkeypatch, ov):
    """A write that fails half-way (here a Ctrl-C) leaves neither file; a missing extra is named."""
    model = vitzoo.create("vit_mnist_tiny")
    for bad, message in [({"opset": 17}, "applies to ONNX export only"), ({"dynamic_size": True}, "not available")]:
        with pytest.raises(ValueError, match=message):
            deploy.export(model, tmp_path / "m.xml", **bad)
    saved_ir = []

    def half_written(converted, xml, compress_to_fp16=True):
        saved_ir.append(compress_to_fp16)
        Path(xml).with_suffix(".bin").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(ov, "save_model", half_written)
    code, _, err = run(capsys, "export", "vit_mnist_tiny", "--out", str(tmp_path / "m.xml"))
    assert code == 130 and err.endswith("vitzoo: interrupted\n") and saved_ir == [False]
    assert list(tmp_path.iterdir()) == []
    for name in ("old.xml", "old.bin"):  # an earlier export there is kept whole
        (tmp_path / name).write_text(name)
    code, _, _ = run(capsys, "export", "vit_mnist_tiny", "--out", str(tmp_path / "old.xml"))
    assert code == 130 and {p.name: p.read_text() for p in tmp_path.iterdir()} == {n: n for n in ("old.xml", "old.bin")}
    for name in ("old.xml", "old.bin"):
        (tmp_path / name).unlink()
    monkeypatch.setitem(sys.modules, "openvino", None)  # what `import openvino` sees when it is absent
    with pytest.raises(ImportError, match=r'OpenVINO export needs openvino.*pip install "vitzoo\[openvino\]"'):
        deploy.export(model, tmp_path / "m.xml")
    code, _, err = run(capsys, "export", "vit_mnist_tiny", "--out", str(tmp_path / "m.xml"))
    assert code == 1 and err.count("\n") == 1 and err.strip().endswith('pip install "vitzoo[openvino]"')
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # end to end in seconds: CI's -m slow pass
def test_openvino_models_freed_in_any_order_leave_signals_working(tmp_path, ov):
    """OpenVINO's CPU plugin points the thread's signal stack at each compiled model's buffer and
    restores what it found when the model is freed: freed out of order, the next Python signal
    handler crashed the process (SIGSEGV, no traceback). compile_openvino and keep_signal_stack
    (around requests and inference, where OpenVINO builds kernels on CPUs without AVX-512) keep it."""
    code = (
        "import gc, signal, torch, vitzoo\n"
        "from vitzoo.deploy import compile_openvino, keep_signal_stack, to_openvino\n"
        "m = vitzoo.create('vit_mnist_tiny').eval()\n"
        "x = torch.randn(2, 1, 32, 32)\n"
        "f32 = {'INFERENCE_PRECISION_HINT': 'f32'}  # under ONEDNN_MAX_CPU_ISA OpenVINO would still pick bf16\n"
        "a = compile_openvino(to_openvino(m, x, dynamic_batch=True), f32)\n"
        "b = compile_openvino(to_openvino(m, x, dynamic_batch=True), f32)\n"
        "with keep_signal_stack():\n"
        "    ra, rb = a.create_infer_request(), b.create_infer_request()\n"
        "    ra.infer([x.numpy()]); rb.infer([x.numpy()])\n"
        "del ra, a; gc.collect(); del rb, b; gc.collect()  # freed in the order compiled\n"
        "signal.signal(signal.SIGUSR1, lambda *a: print('handled'))\n"
        "junk = [bytearray(4096) for _ in range(10000)]  # reuse what was freed\n"
        "signal.raise_signal(signal.SIGUSR1)\n"
    )
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "handled", (done.returncode, done.stderr[-2000:])
