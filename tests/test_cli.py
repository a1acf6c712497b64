"""The `vitzoo` command. Most tests call `cli.main(argv)` in-process (fast, same code path as the
console script); a few run the real thing in a subprocess: `python -m vitzoo` and the installed
`vitzoo` script, with exit codes and the exact stderr a user sees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from test_plugins import GOOD, write_dist

import vitzoo
from vitzoo import cli, registry
from vitzoo.flops import vit_flops
from vitzoo.model import ViTConfig

SUBCOMMANDS = ["list", "info", "download", "convert", "predict", "export", "finetune", "eval", "viz"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*argv: str, env: dict[str, str] | None = None, script: bool = False) -> subprocess.CompletedProcess:
    """The real command in a fresh interpreter: `python -m vitzoo`, or the installed `vitzoo` script."""
    if script:
        exe = shutil.which("vitzoo", path=str(Path(sys.executable).parent)) or shutil.which("vitzoo")
        if exe is None:
            pytest.skip("the `vitzoo` console script is not installed next to this Python")
        cmd = [exe, *argv]
    else:
        cmd = [sys.executable, "-m", "vitzoo", *argv]
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}  # never reach for the real Hub
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=120)


# ------------------------------------------------------------------------------------ usage
def test_every_subcommand_has_help(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and all(cmd in out for cmd in SUBCOMMANDS)
    for cmd in SUBCOMMANDS:
        code, out, _ = run(capsys, cmd, "--help")
        assert code == 0, cmd
        assert out.startswith(f"usage: vitzoo {cmd}"), cmd


@pytest.mark.parametrize(
    "argv",
    [
        ["lst"],
        ["info"],
        ["list", "--bogus"],
        ["convert", "a"],
        ["predict", "vit_mnist", "x.png", "--topk", "0"],
        ["predict", "vit_mnist", "x.png", "--topk", "many"],
        ["convert", "a", "b", "--to", "onnx"],
    ],
)
def test_bad_usage_exits_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert "error:" in err and "Traceback" not in err


def test_failure_is_one_line_and_debug_shows_the_traceback(capsys):
    code, out, err = run(capsys, "info", "vit_b61")
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("vitzoo: error: unknown model 'vit_b61'; did you mean 'vit_b16'")
    with pytest.raises(vitzoo.UnknownModelError):
        cli.main(["--debug", "info", "vit_b61"])
    with pytest.raises(vitzoo.UnknownModelError):
        cli.main(["info", "vit_b61", "--debug"])


# ------------------------------------------------------------------------------------ list / info
def test_list_table_json_and_patterns(capsys):
    code, out, _ = run(capsys, "list", "deit")  # a bare word is a substring
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "PARAMS", "GFLOPS", "INPUT", "PRETRAINED", "ORIGIN"]
    assert [line.split()[0] for line in lines[1:]] == vitzoo.list_models("deit*")

    code, out, _ = run(capsys, "list", "mnist")  # tiny figures stay readable: no scientific notation
    assert out.splitlines()[2].split()[:4] == ["vit_mnist_tiny", "5,689", "0.0000505", "1x32x32"]

    code, out, _ = run(capsys, "list", "vit_?16", "--json")
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["vit_b16", "vit_l16", "vit_s16"]
    b16 = rows[0]
    info = vitzoo.model_info("vit_b16")
    assert b16["num_params"] == info["num_params"] == 86_567_656
    assert b16["gflops"] == vit_flops(ViTConfig.from_dict(info["config"])).total / 1e9
    assert b16["pretrained"] == list(info["pretrained"]) and b16["origin"] == "built-in"

    code, out, _ = run(capsys, "list", "--pretrained", "--json")
    assert [r["name"] for r in json.loads(out)] == vitzoo.list_models(pretrained=True)
    code, out, _ = run(capsys, "list", "--pretrained", "vit_b16")
    assert "vit_b16.augreg2_in21k_ft_in1k  *" in out and "hf-hub:timm/vit_base_patch16_224.augreg_in21k_ft_in1k" in out


def test_pattern_matching_nothing_fails(capsys):
    code, out, err = run(capsys, "list", "resnet*")
    assert (code, out) == (1, "")
    assert err == "vitzoo: error: no model matches 'resnet*' (run `vitzoo list` to see every name)\n"
    code, _, err = run(capsys, "list", "--pretrained", "mnist")  # MNIST models have no weights
    assert code == 1 and "no pretrained model matches 'mnist'" in err


def test_pattern_matching_nothing_is_an_empty_json_list(capsys):
    """For a program an empty list is an answer: `[]` and exit 0 (people get the error above)."""
    for argv in (["list", "NOMATCH", "--json"], ["list", "--pretrained", "mnist", "--json"]):
        assert run(capsys, *argv) == (0, "[]\n", "")


def test_info(capsys):
    code, out, _ = run(capsys, "info", "deit_ti16_distilled")
    assert code == 0
    assert "origin       built-in" in out and "5,910,800" in out
    assert "GFLOPs       2.522 at 3x224x224" in out
    pre = vitzoo.model_info("deit_ti16_distilled")["preprocessing"]
    assert "deit_ti16_distilled.fb_in1k" in out and f"crop_pct {pre['crop_pct']}" in out
    assert f"mean / std     {pre['mean']} / {pre['std']}" in out

    code, out, _ = run(capsys, "info", "vit_b16.augreg_in21k_ft_in1k", "--json")
    info = json.loads(out)
    assert info["default_pretrained"] == "augreg_in21k_ft_in1k"
    assert info["config"]["embed_dim"] == 768 and info["num_params"] == 86_567_656
    assert round(info["gflops"], 3) == 35.128
    assert info["preprocessing"]["source"] == "hf-hub:timm/vit_base_patch16_224.augreg_in21k_ft_in1k"
    code, _, err = run(capsys, "info", "vit_b16.nope")
    assert code == 1 and "has no pretrained tag 'nope'" in err


def test_info_reports_user_code_origin(capsys):
    vitzoo.register("cli_user_variant", base="vit_mnist_tiny", depth=1)
    try:
        code, out, _ = run(capsys, "info", "cli_user_variant", "--json")
        assert code == 0 and json.loads(out)["origin"] == "user code"
    finally:
        registry.unregister("cli_user_variant")


# ------------------------------------------------------------------------------------ predict
def digit_images(tmp_path: Path) -> list[Path]:
    """Two 32x32 grayscale PNGs (the input size of vit_mnist_tiny: no resize involved)."""
    rng = np.random.default_rng(0)
    paths = []
    for i in range(2):
        path = tmp_path / f"digit{i}.png"
        Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8), mode="L").save(path)
        paths.append(path)
    return paths


def test_predict_with_saved_weights(tmp_path, capsys):
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist_tiny").eval()
    model.save_pretrained(tmp_path / "weights")
    images = digit_images(tmp_path)

    code, out, err = run(
        capsys,
        "predict",
        "vit_mnist_tiny",
        *map(str, images),
        "--weights",
        str(tmp_path / "weights"),
        "--topk",
        "3",
        "--json",
    )
    assert code == 0, err
    result = json.loads(out)
    # The expected probabilities, computed independently: pixels / 255, MNIST mean/std.
    pixels = torch.stack([torch.from_numpy(np.array(Image.open(p))).float() / 255 for p in images]).unsqueeze(1)
    with torch.no_grad():
        probs = model((pixels - 0.1307) / 0.3081).softmax(-1)
    for r, p in zip(result, probs):
        top = p.topk(3)
        assert [x["index"] for x in r["predictions"]] == top.indices.tolist()
        assert [x["label"] for x in r["predictions"]] == [str(i) for i in top.indices.tolist()]
        assert [x["probability"] for x in r["predictions"]] == pytest.approx(top.values.tolist(), abs=1e-5)

    code, out, _ = run(
        capsys, "predict", "vit_mnist_tiny", str(images[0]), "--weights", str(tmp_path / "weights"), "--topk", "20"
    )
    assert code == 0 and out.splitlines()[0].split() == ["IMAGE", "RANK", "PROB", "CLASS", "LABEL"]
    assert len(out.splitlines()) == 1 + 10  # topk is capped at the number of classes


def test_predict_bad_input(tmp_path, capsys):
    good = digit_images(tmp_path)[0]
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    code, _, err = run(capsys, "predict", "vit_mnist_tiny", str(good), str(broken), "--weights", str(tmp_path))
    assert code == 1 and f"cannot read image {str(broken)!r}" in err and err.count("\n") == 1
    code, _, err = run(capsys, "predict", "vit_mnist_tiny", str(tmp_path / "missing.png"))
    assert code == 1 and "image" in err and "missing.png' does not exist" in err
    code, _, err = run(capsys, "predict", "vit_mnist_tiny", str(good), "--weights", str(tmp_path / "nowhere"))
    assert code == 1 and f"weights source {str(tmp_path / 'nowhere')!r} is neither an existing file" in err
    code, _, err = run(capsys, "predict", "vit_mnist_tiny", str(good))
    assert code == 2 and "has no pretrained weights; pass --weights" in err
    code, _, err = run(capsys, "predict", "not_a_model", str(good))
    assert code == 1 and "unknown model 'not_a_model'" in err


# ------------------------------------------------------------------------------------ convert
def test_convert_bare_file_to_vitzoo_and_timm(tmp_path, capsys):
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist").eval()
    save_file(model.state_dict(), tmp_path / "bare.safetensors")

    code, out, err = run(
        capsys, "convert", str(tmp_path / "bare.safetensors"), str(tmp_path / "ours"), "--model", "vit_mnist"
    )
    assert code == 0, err
    assert out.strip() == f"converted {tmp_path / 'bare.safetensors'} -> {tmp_path / 'ours'} (vitzoo layout)"
    restored = vitzoo.from_pretrained(tmp_path / "ours").eval()
    x = torch.randn(2, 1, 28, 28)
    assert torch.equal(restored(x), model(x))

    # vit_mnist's conv stem has no timm name: a clear error, no file; a plain ViT converts.
    code, _, err = run(capsys, "convert", str(tmp_path / "ours"), str(tmp_path / "t.safetensors"), "--to", "timm")
    assert code == 1 and "convolutional stem" in err and not (tmp_path / "t.safetensors").exists()
    plain = vitzoo.create("vit_mnist", conv_stem=(), patch_size=7).eval()
    plain.save_pretrained(tmp_path / "plain")
    code, out, err = run(
        capsys, "convert", str(tmp_path / "plain"), str(tmp_path / "t.safetensors"), "--to", "timm", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["dst"] == str(tmp_path / "t.safetensors")
    timm_state = load_file(tmp_path / "t.safetensors")
    assert all(torch.equal(timm_state[k], v) for k, v in plain.state_dict().items())

    code, _, err = run(capsys, "convert", str(tmp_path / "absent.safetensors"), str(tmp_path / "x"))
    assert code == 1 and "absent.safetensors' is neither an existing file" in err
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------ download
def test_download_fills_the_cache(tmp_path, fake_hub, hf_cache, capsys, monkeypatch):
    """`vitzoo download` through the local fake Hub (tests/conftest.py), then offline use."""
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist_tiny").eval()
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    fake_hub.publish("acme/tiny-digits", {"model.safetensors": tmp_path / "w.safetensors"})
    vitzoo.register(
        "cli_hub_variant",
        base="vit_mnist_tiny",
        pretrained={
            "acme": vitzoo.PretrainedCfg(source="hf-hub:acme/tiny-digits", input_size=(1, 32, 32), num_classes=10)
        },
    )
    try:
        code, out, err = run(capsys, "download", "cli_hub_variant", "--json")
        assert code == 0, err
        [path] = json.loads(out)["cli_hub_variant"]
        assert Path(path).is_file() and Path(path).is_relative_to(hf_cache)
        assert Path(path).read_bytes() == (tmp_path / "w.safetensors").read_bytes()
        assert len(fake_hub.gets("model.safetensors")) == 1

        fake_hub.reset()  # the Hub forgets the repo: from now on only the cache can serve it
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        loaded = vitzoo.create("cli_hub_variant", pretrained=True).eval()
        x = torch.randn(1, 1, 32, 32)
        assert torch.equal(loaded(x), model(x))
        # predict without --weights takes the model's own (now cached) source
        code, out, err = run(capsys, "predict", "cli_hub_variant", str(digit_images(tmp_path)[0]), "--json")
        assert code == 0, err
        assert sum(p["probability"] for p in json.loads(out)[0]["predictions"]) <= 1 + 1e-6

        code, _, err = run(capsys, "download", "vit_mnist_tiny")
        assert code == 1 and "has no pretrained weights" in err
    finally:
        registry.unregister("cli_hub_variant")


# ------------------------------------------------------------------------------------ subprocesses
@pytest.mark.slow
def test_python_m_vitzoo_with_plugins_on_the_path(tmp_path):
    """Real discovery from PYTHONPATH: a good plugin is listed with its origin, a broken one costs
    exactly one warning line on stderr, and the command still succeeds."""
    write_dist(tmp_path, "good-plugin", {"good_plug": GOOD}, {"good": "good_plug"})
    write_dist(
        tmp_path, "broken-plugin", {"broken_plug": "raise RuntimeError('plugin bug')\n"}, {"broken": "broken_plug"}
    )
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = run_process("info", "plug_tiny", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["origin"] == "plugin (good-plugin)"
    assert proc.stderr.splitlines() == [
        "vitzoo: warning: vitzoo plugin 'broken' (broken_plug, distribution 'broken-plugin') failed to load "
        "and is skipped: RuntimeError: plugin bug"
    ]


@pytest.mark.slow
def test_python_m_vitzoo_failure_has_no_traceback():
    proc = run_process("predict", "vit_b61", "cat.png")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("vitzoo: error: ") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_installed_console_script():
    proc = run_process("list", "mnist", "--json", script=True)
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == ["vit_mnist", "vit_mnist_tiny"]


# ------------------------------------------------------------------------------------ delegated
def test_delegated_subcommands_take_their_options_from_their_modules(capsys):
    """finetune / eval / viz are configured by vitzoo.train and vitzoo.viz: every option those
    modules define shows in `vitzoo CMD --help`."""
    import argparse
    import importlib

    for cmd, (module, configure, _, _) in cli.DELEGATED.items():
        reference = argparse.ArgumentParser()
        getattr(importlib.import_module(module), configure)(reference)
        options = {s for action in reference._actions for s in action.option_strings if s.startswith("--")}
        code, out, _ = run(capsys, cmd, "--help")
        assert code == 0 and options, cmd
        assert all(option in out for option in options), (cmd, sorted(o for o in options if o not in out))


def test_delegated_subcommand_runs(tmp_path, capsys):
    code, _, err = run(capsys, "viz", "patches", "--patch-size", "32", "--out", str(tmp_path / "p.png"))
    assert code == 0, err
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_viz_json(tmp_path, capsys):
    """`vitzoo viz` takes --json like every subcommand, after KIND or before it."""
    out_png = tmp_path / "p.png"
    for argv in (["viz", "patches", "--json"], ["viz", "--json", "patches"]):
        code, out, err = run(capsys, *argv, "--patch-size", "32", "--dpi", "50", "--out", str(out_png))
        assert code == 0, err
        data = json.loads(out)
        assert data["kind"] == "patches" and data["out"] == str(out_png) and data["dpi"] == 50
        assert data["width"] > 0 and data["height"] > 0 and out_png.is_file()
    code, out, _ = run(capsys, "viz", "patches", "--patch-size", "32", "--out", str(out_png))
    assert code == 0 and out.startswith(f"wrote {out_png} (")  # without --json: the sentence


def test_missing_delegated_module_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.setitem(cli.DELEGATED, "viz", ("vitzoo.no_such_module", "configure_viz_parser", "run_viz", "draw"))
    code, out, err = run(capsys, "viz", "patches", "--out", "x.png")
    assert (code, out) == (1, "")
    assert err == (
        "vitzoo: error: `vitzoo viz` is not available in this installation "
        "(ModuleNotFoundError: No module named 'vitzoo.no_such_module')\n"
    )


def test_info_of_a_builder_that_is_not_a_vit(capsys):
    """GFLOPs of any module a builder returns are counted on the meta device."""
    from torch import nn

    @vitzoo.register_model(name="cli_convnet", default_cfg=vitzoo.PretrainedCfg(input_size=(3, 16, 16), num_classes=10))
    def build(**overrides):
        return nn.Sequential(nn.Conv2d(3, 4, 4, stride=4), nn.Flatten(), nn.Linear(64, 10))

    try:
        code, out, err = run(capsys, "info", "cli_convnet", "--json")
        assert code == 0, err
        info = json.loads(out)
        assert info["config"] is None and info["num_params"] == 3 * 4 * 16 + 4 + 64 * 10 + 10
        # conv: 16 positions x 4 filters x 48 multiply-adds; linear: 64 x 10
        assert info["gflops"] * 1e9 == pytest.approx(2 * (16 * 4 * 48 + 64 * 10))
        code, out, _ = run(capsys, "list", "cli_conv")
        assert code == 0 and "cli_convnet" in out and "user code" in out
    finally:
        registry.unregister("cli_convnet")
