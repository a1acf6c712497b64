"""The `vitzoo` command. Most tests call `cli.main(argv)` in-process (fast, same code path as the
console script); a few run the real thing in a subprocess: `python -m vitzoo` and the installed
`vitzoo` script, with exit codes and the exact stderr a user sees."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

import vitzoo
from vitzoo import cli, plugins, registry
from vitzoo.flops import vit_flops
from vitzoo.model import ViTConfig

from test_plugins import GOOD, write_dist  # noqa: E402  (tests/ is on sys.path under pytest)

SUBCOMMANDS = ["list", "info", "download", "convert", "predict", "finetune", "eval", "viz"]


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
    [["lst"], ["info"], ["list", "--bogus"], ["convert", "a"], ["predict", "vit_mnist", "x.png", "--topk", "0"],
     ["predict", "vit_mnist", "x.png", "--topk", "many"], ["convert", "a", "b", "--to", "onnx"]],
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
        registry._REGISTRY.pop("cli_user_variant")


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

    code, out, err = run(capsys, "predict", "vit_mnist_tiny", *map(str, images), "--weights", str(tmp_path / "weights"),
                         "--topk", "3", "--json")
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

    code, out, _ = run(capsys, "predict", "vit_mnist_tiny", str(images[0]), "--weights", str(tmp_path / "weights"), "--topk", "20")
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
    assert code == 1 and "nowhere' do not exist" in err
    code, _, err = run(capsys, "predict", "vit_mnist_tiny", str(good))
    assert code == 2 and "has no pretrained weights; pass --weights" in err
    code, _, err = run(capsys, "predict", "not_a_model", str(good))
    assert code == 1 and "unknown model 'not_a_model'" in err


# ------------------------------------------------------------------------------------ convert
def test_convert_bare_file_to_vitzoo_and_timm(tmp_path, capsys):
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist").eval()
    save_file(model.state_dict(), tmp_path / "bare.safetensors")

    code, out, err = run(capsys, "convert", str(tmp_path / "bare.safetensors"), str(tmp_path / "ours"), "--model", "vit_mnist")
    assert code == 0, err
    assert out.strip() == f"converted {tmp_path / 'bare.safetensors'} -> {tmp_path / 'ours'} (vitzoo layout)"
    restored = vitzoo.from_pretrained(tmp_path / "ours").eval()
    x = torch.randn(2, 1, 28, 28)
    assert torch.equal(restored(x), model(x))

    code, out, err = run(capsys, "convert", str(tmp_path / "ours"), str(tmp_path / "t.safetensors"), "--to", "timm", "--json")
    assert code == 0, err
    assert json.loads(out)["dst"] == str(tmp_path / "t.safetensors")
    timm_state = load_file(tmp_path / "t.safetensors")
    assert all(torch.equal(timm_state[k], v) for k, v in model.state_dict().items())

    code, _, err = run(capsys, "convert", str(tmp_path / "absent.safetensors"), str(tmp_path / "x"))
    assert code == 1 and "absent.safetensors' does not exist" in err
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------ download
class FakeHub(BaseHTTPRequestHandler):
    """Answers the Hub's `/{org}/{repo}/resolve/{revision}/{file}` (HEAD and GET) from `files`."""

    files: dict[str, bytes] = {}
    commit = "0123456789abcdef0123456789abcdef01234567"

    def _answer(self, body: bool) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            self.send_response(404)
            self.end_headers()
            return
        repo, filename = "/".join(parts[:2]), "/".join(parts[4:])
        data = self.files.get(f"{repo}/{filename}")
        if data is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound" if any(k.startswith(repo + "/") for k in self.files) else "RepoNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("X-Repo-Commit", self.commit)
        self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield FakeHub
    server.shutdown()
    FakeHub.files = {}


def test_download_fills_the_cache(tmp_path, fake_hub, capsys, monkeypatch):
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist_tiny")
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    fake_hub.files = {"acme/tiny-digits/model.safetensors": (tmp_path / "w.safetensors").read_bytes()}
    vitzoo.register(
        "cli_hub_variant", base="vit_mnist_tiny",
        pretrained={"acme": vitzoo.PretrainedCfg(source="hf-hub:acme/tiny-digits", input_size=(1, 32, 32), num_classes=10)},
    )
    try:
        code, out, err = run(capsys, "download", "cli_hub_variant", "--json")
        assert code == 0, err
        [path] = json.loads(out)["cli_hub_variant"]
        assert Path(path).is_file() and str(tmp_path / "cache") in path
        assert all(torch.equal(a, b) for a, b in zip(load_file(path).values(), load_file(tmp_path / "w.safetensors").values()))

        fake_hub.files = {}  # the server forgets the file: the cache now serves it, offline
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        loaded = vitzoo.create("cli_hub_variant", pretrained=True).eval()
        x = torch.randn(1, 1, 32, 32)
        assert torch.equal(loaded(x), model.eval()(x))

        code, _, err = run(capsys, "download", "vit_mnist_tiny")
        assert code == 1 and "has no pretrained weights" in err
    finally:
        registry._REGISTRY.pop("cli_hub_variant")


# ------------------------------------------------------------------------------------ subprocesses
def test_python_m_vitzoo_with_plugins_on_the_path(tmp_path):
    """Real discovery from PYTHONPATH: a good plugin is listed with its origin, a broken one costs
    exactly one warning line on stderr, and the command still succeeds."""
    write_dist(tmp_path, "good-plugin", {"good_plug": GOOD}, {"good": "good_plug"})
    write_dist(tmp_path, "broken-plugin", {"broken_plug": "raise RuntimeError('plugin bug')\n"}, {"broken": "broken_plug"})
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = run_process("info", "plug_tiny", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["origin"] == "plugin (good-plugin)"
    assert proc.stderr.splitlines() == [
        "vitzoo: warning: vitzoo plugin 'broken' (broken_plug, distribution 'broken-plugin') failed to load "
        "and is skipped: RuntimeError: plugin bug"
    ]


def test_python_m_vitzoo_failure_has_no_traceback():
    proc = run_process("predict", "vit_b61", "cat.png")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("vitzoo: error: ") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_installed_console_script():
    proc = run_process("list", "mnist", "--json", script=True)
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == ["vit_mnist", "vit_mnist_tiny"]
