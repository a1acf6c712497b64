"""vitzoo/precision.py and dtype=: inference in bf16 / fp16 for every model, "auto" by the hardware
and, on a CPU with native bf16, by what the precision probe measured (tests/test_precision_probe.py)."""

from __future__ import annotations

import re
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo import precision
from vitzoo.layers.swiglu import packed_mlp_ratio
from vitzoo.precision import auto_dtype, cpu_bf16_flags, parse_dtype
from vitzoo.zoo.curated import CURATED as _CURATED_MODELS

CURATED = {m.name for m in _CURATED_MODELS}


@pytest.mark.every_config
@pytest.mark.parametrize("name", sorted(CURATED))  # the generated releases run the same code
def test_every_model_runs_in_bf16_close_to_fp32(name):
    """Norms, tokens, position embeddings (learned and sincos), conv stems and heads all follow
    the cast, and the model takes the fp32 images the preprocessing gives."""
    torch.manual_seed(0)
    # One block, and at most 384 wide (head width 64): the cast does not depend on the width, and
    # the 2026 families' full widths (up to the 7B's 4096) would take most of this test's time.
    config = vitzoo.model_info(name)["config"]
    narrow: dict[str, Any] = {"embed_dim": 384, "num_heads": 6} if config["embed_dim"] > 384 else {}
    if narrow and config["mlp_layer"] == "swiglu_packed":  # fc1 holds gate and input halves: an even width
        narrow["mlp_ratio"] = packed_mlp_ratio(384, int(384 * config["mlp_ratio"]) // 2)
    fp32 = vitzoo.create(name, depth=1, **narrow).eval()
    bf16 = vitzoo.create(name, depth=1, dtype="bf16", **narrow).eval()
    bf16.load_state_dict(fp32.state_dict())  # load_state_dict casts into the bf16 parameters
    assert {t.dtype for t in [*bf16.parameters(), *bf16.buffers()] if t.is_floating_point()} == {torch.bfloat16}
    x = torch.randn(2, *fp32.pretrained_cfg.input_size)
    with torch.inference_mode():
        a, b = fp32(x), bf16(x)  # fp32 input into the bf16 model
    assert b.dtype == torch.bfloat16
    assert float((a - b.float()).abs().max() / a.abs().max()) < 0.05


def test_dtype_round_trips_through_save_and_load(tmp_path: Path):
    model = vitzoo.create("deit_ti16", depth=1, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    back = vitzoo.from_pretrained(tmp_path / "bf16")  # a checkpoint's bf16 tensors load into fp32
    assert back.patch_embed.proj.weight.dtype == torch.float32
    assert torch.equal(back.patch_embed.proj.weight, model.patch_embed.proj.weight.float())
    again = vitzoo.create("deit_ti16", weights=str(tmp_path / "bf16"), depth=1, dtype="bf16")
    assert torch.equal(again.pos_embed, model.pos_embed)
    again.reset_classifier(3)
    assert again.head.weight.dtype == torch.bfloat16


def test_parse_dtype_names_and_errors():
    assert parse_dtype("fp16") == (torch.float16, "as asked")
    assert parse_dtype(torch.bfloat16)[0] == torch.bfloat16
    with pytest.raises(ValueError, match=r"dtype='int8' is invalid; expected one of auto, fp32, bf16, fp16"):
        parse_dtype("int8")
    with pytest.raises(ValueError, match="expected a floating-point dtype"):
        parse_dtype(torch.int8)
    with pytest.raises(ValueError, match="dtype='half' is invalid"):
        vitzoo.create("vit_mnist", dtype="half")


def test_auto_picks_bf16_only_where_the_cpu_multiplies_it_natively_and_faster(tmp_path: Path, monkeypatch):
    amx = tmp_path / "amx"
    amx.write_text("processor : 0\nflags : fpu sse avx512f avx512_bf16 amx_bf16 amx_tile\n")
    plain = tmp_path / "plain"
    plain.write_text("processor : 0\nflags : fpu sse avx2 avx512f\n")
    assert cpu_bf16_flags(amx) == ("amx_bf16", "avx512_bf16") and cpu_bf16_flags(plain) == ()
    assert cpu_bf16_flags(tmp_path / "missing") == ()
    monkeypatch.setattr(precision, "native_bf16_flags", lambda: ("amx_bf16",))
    monkeypatch.setenv("VITZOO_PRECISION", "bf16")  # the probe's answer (tests/test_precision_probe.py)
    dtype, why = auto_dtype("cpu")
    assert dtype == torch.bfloat16 and "amx_bf16" in why
    monkeypatch.setenv("VITZOO_PRECISION", "fp32")  # native units, measured slower here
    dtype, why = auto_dtype("cpu")
    assert dtype == torch.float32 and "multiplies bf16 matrices natively (amx_bf16), but VITZOO_PRECISION=fp32" in why
    monkeypatch.setattr(precision, "native_bf16_flags", lambda: ())
    dtype, why = auto_dtype("cpu")
    assert dtype == torch.float32 and "no native bf16" in why
    assert parse_dtype("auto")[0] == torch.float32


def test_arm_bf16_and_isa_caps_decide_native_bf16(tmp_path: Path, monkeypatch):
    arm = tmp_path / "arm"
    arm.write_text("processor : 0\nFeatures : fp asimd sve bf16 i8mm\n")
    assert cpu_bf16_flags(arm) == ("bf16",)  # aarch64's FEAT_BF16 (Graviton 3, Neoverse V1 and later)
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: ("amx_bf16",))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(precision.platform, "machine", lambda: "x86_64")
    for var in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(var, raising=False)
    assert precision.bf16_isa_cap() is None and precision.native_bf16_flags() == ("amx_bf16",)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")  # oneDNN run as an AVX2-only CPU
    assert precision.bf16_isa_cap() == "ONEDNN_MAX_CPU_ISA=AVX2" and precision.native_bf16_flags() == ()
    dtype, why = auto_dtype("cpu")
    assert dtype == torch.float32 and "ONEDNN_MAX_CPU_ISA=AVX2" in why and "emulated" in why
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")  # a cap above bf16 changes nothing
    assert precision.bf16_isa_cap() is None
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # ATEN_CPU_CAPABILITY=avx2
    assert precision.bf16_isa_cap() == "ATen's CPU capability AVX2"
    monkeypatch.setattr(precision.platform, "machine", lambda: "aarch64")  # ATen's capability is no x86 ISA there
    assert precision.bf16_isa_cap() is None


def test_bf16_asked_for_without_bf16_units_runs_and_says_once_that_it_is_emulated(monkeypatch):
    monkeypatch.setattr(precision, "native_bf16_flags", lambda: ())
    monkeypatch.setattr(precision, "_warned_emulated", threading.Event())
    with pytest.warns(precision.EmulatedPrecisionWarning, match="bf16 is emulated here, slower than fp32") as seen:
        model = vitzoo.create("vit_mnist_tiny", dtype="bf16").eval()
    assert seen[0].filename == __file__  # the warning points at the user's line, not vitzoo's
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        assert parse_dtype("bf16") == (torch.bfloat16, "as asked (emulated on this CPU, slower than fp32)")
        assert parse_dtype(torch.bfloat16, "cuda")[1] == "as asked"  # a GPU is not this CPU
    with torch.inference_mode():  # runs (F.linear emulates bf16 where oneDNN's fused op cannot)
        out = model(torch.randn(2, *model.pretrained_cfg.input_size))
    assert out.dtype == torch.bfloat16 and bool(torch.isfinite(out).all())
    monkeypatch.setattr(precision, "native_bf16_flags", lambda: ("amx_bf16",))
    monkeypatch.setattr(precision, "_warned_emulated", threading.Event())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # native: nothing to say
        assert parse_dtype("bf16") == (torch.bfloat16, "as asked")


def test_a_cast_that_would_overflow_is_refused_naming_the_tensor():
    model = vitzoo.create("vit_mnist_tiny")
    with torch.no_grad():
        model.blocks[0].mlp.fc1.weight[0, 0] = -7e4
    with pytest.raises(ValueError, match=r"cannot cast the model to fp16: blocks\.0\.mlp\.fc1\.weight hold values"):
        precision.cast_model(model, torch.float16)
    assert model.blocks[0].mlp.fc1.weight.dtype == torch.float32  # left as it was
    assert precision.cast_model(model, torch.bfloat16).blocks[0].mlp.fc1.weight.dtype == torch.bfloat16


def test_create_with_fp16_refuses_weights_beyond_its_range(tmp_path: Path):
    model = vitzoo.create("vit_mnist_tiny")
    with torch.no_grad():
        model.head.bias[2] = 1e6
    model.save_pretrained(tmp_path / "w")
    with pytest.raises(ValueError, match=r"fp16: head\.bias hold values beyond its range \(largest 65504\)"):
        vitzoo.create("vit_mnist_tiny", weights=tmp_path / "w", dtype=torch.float16)
    assert vitzoo.create("vit_mnist_tiny", weights=tmp_path / "w", dtype="bf16").head.bias.dtype == torch.bfloat16


def test_loading_nonfinite_weights_warns_once_naming_them(tmp_path: Path):
    model = vitzoo.create("vit_mnist_tiny")
    with torch.no_grad():
        model.head.bias[1] = float("nan")
    model.save_pretrained(tmp_path / "w")
    with pytest.warns(UserWarning, match=r"model.safetensors holds NaN or infinite values in head.bias$") as caught:
        loaded = vitzoo.from_pretrained(tmp_path / "w")
    assert len(caught) == 1 and precision.nonfinite_tensors(loaded) == ["head.bias"]
    with pytest.raises(ValueError, match=r"NaN or infinite values in head.bias; its outputs would be NaN"):
        precision.refuse_nonfinite(loaded, "the weights")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_all_finite_finds_nan_and_both_infinities_anywhere(dtype):
    t = torch.randn(7, 5).to(dtype)
    assert precision.all_finite(t) and precision.all_finite(t[:0])
    for bad in (float("nan"), float("inf"), -float("inf")):
        for where in ((0, 0), (3, 2), (6, 4)):
            u = t.clone()
            u[where] = bad
            assert not precision.all_finite(u), (bad, where)


# Every way of running a model in fp16, and the one refusal each gives (precision.check_castable
# for a weight beyond the range, precision.check_outputs for an activation beyond it).
BEYOND = {
    "a weight": r"cannot cast the model to fp16: blocks\.2\.mlp\.fc2\.bias hold values beyond its range "
    r"\(largest 65504\), which would become infinite; use fp32 or bf16",
    "an activation": r"cannot run the model in fp16: its outputs are NaN or infinite \(an activation went beyond "
    r"fp16's range, largest 65504, though every weight fits\); use fp32 or bf16",
}
COMMANDS = {
    "predict": ("predict", "vit_mnist_tiny", "{image}", "--output", "{out}.csv", "--no-progress"),
    "eval": ("eval", "vit_mnist_tiny", "--data", "mnist-sample", "--json"),
    "features": ("features", "vit_mnist_tiny", "mnist-sample", "--out", "{out}.safetensors", "--no-progress"),
    "export": ("export", "vit_mnist_tiny", "--out", "{out}.onnx"),  # .pt2 needs torch >= 2.2
    "segment": ("segment", "vit_mnist_tiny", "{scenes}", "--out", "{out}", "--crop=32", "--steps=5", "--no-progress"),
}


def _beyond_fp16(directory: Path, kind: str) -> Path:
    """vit_mnist_tiny saved with its last MLP biases at 1e5 (beyond fp16: the cast overflows), or
    at 4e4 in the last two blocks (each fits; their sum in the residual stream does not)."""
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist_tiny")
    with torch.no_grad():
        for block in model.blocks[-2:] if kind == "an activation" else model.blocks[-1:]:
            block.mlp.fc2.bias.fill_(4e4 if kind == "an activation" else 1e5)
    model.save_pretrained(directory)
    return directory


@pytest.mark.parametrize("kind", BEYOND)
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_fp16_beyond_its_range_the_same_way(command, kind, tmp_path, capsys, request):
    from commands.helpers import digit_images, run
    from test_deploy import cpu_runs_fp16_convolutions

    if kind == "an activation" and not cpu_runs_fp16_convolutions():
        pytest.skip(f"torch {torch.__version__} has no fp16 convolution on the CPU: the model cannot run in fp16")

    weights = _beyond_fp16(tmp_path / "w", kind)
    image = digit_images(tmp_path)[0]
    scenes = request.getfixturevalue("digit_scenes") if command == "segment" else None  # elsewhere than tmp_path
    argv = [a.format(image=image, out=tmp_path / "out", scenes=scenes) for a in COMMANDS[command]]
    code, out, err = run(capsys, *argv, "--weights", str(weights), "--dtype", "fp16")
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert re.fullmatch(f"vitzoo: error: {BEYOND[kind]}\n", err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digit0.png", "digit1.png", "w"]  # nothing written
    code, _, err = run(capsys, *argv, "--weights", str(weights), "--dtype", "fp32")
    assert code == 0, err  # fp32 has the range


@pytest.mark.parametrize(
    "load",
    [
        lambda w, dtype: vitzoo.create("vit_mnist_tiny", weights=w, dtype=dtype),
        lambda w, dtype: vitzoo.from_pretrained(w, dtype=dtype),
        lambda w, dtype: precision.cast_model(vitzoo.from_pretrained(w), dtype),
    ],
    ids=["create", "from_pretrained", "cast_model"],
)
def test_every_cast_in_python_refuses_a_weight_beyond_fp16_the_same_way(load, tmp_path):
    weights = _beyond_fp16(tmp_path / "w", "a weight")
    with pytest.raises(precision.PrecisionRangeError, match=f"^{BEYOND['a weight']}$"):
        load(weights, torch.float16)
    assert {p.dtype for p in load(weights, torch.bfloat16).parameters()} == {torch.bfloat16}
