"""Sapiens2 (timm's vit_*_patch16_sapiens2, transformers' sapiens2): grouped-query attention with a
key/value head count per block, qk-norm per head, LayerScale on the attention branch only, DINOv3's
rotary positions. Through vitzoo's registered name at reduced depth and width, with timm's random
weights: timm's output at the native (portrait) size and at another size, its intermediates; and
the backbone paths (features_only, dense_features, optimize, torch.export and ONNX), a short
fine-tuning run and the attention / PCA pictures on a tiny copy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo import deploy, registry
from vitzoo.cli import main
from vitzoo.weights.keymaps import to_vitzoo

ATOL = 1e-5
NAME = "vit_l16_sapiens2"  # registered from timm's vit_large_patch16_sapiens2.fb
# depth 2: full attention in block 0, two key/value heads for four query heads in block 1
SMALL: dict[str, Any] = dict(depth=2, embed_dim=64, num_heads=4, num_kv_heads=(4, 2), img_size=(64, 48))


def _timm_model() -> torch.nn.Module:
    timm = pytest.importorskip("timm")
    if not timm.is_model("vit_large_patch16_sapiens2"):
        pytest.skip(f"timm {timm.__version__} has no Sapiens2 (timm 1.0.31 has)")
    torch.manual_seed(0)
    model = timm.create_model("vit_large_patch16_sapiens2", pretrained=False, **SMALL).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    return model


@pytest.fixture(scope="module")
def pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    theirs = _timm_model()
    ours = vitzoo.create(NAME, pretrained=False, **SMALL).eval()
    ours.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=NAME).state, strict=True)
    return ours, theirs


def test_registered_releases_are_timms_five():
    names = {n for n in vitzoo.list_models() if "sapiens2" in n}
    assert names == {f"vit_{s}16_sapiens2" for s in ("b", "l", "h", "g", "5b")}
    config = registry.get_entry("vit_5b16_sapiens2").resolve_config()  # never built: 5B parameters
    assert config.kv_heads == (32,) * 8 + (16,) * 40 + (32,) * 8 and config.num_params > 5e9
    with pytest.raises(ValueError, match=r"num_kv_heads=.* has 56 entries for depth=2"):
        vitzoo.create("vit_5b16_sapiens2", pretrained=False, depth=2)


@pytest.mark.parametrize("size", [(64, 48), (48, 80)], ids=["native", "other"])
def test_computes_timms_output_and_intermediates(pair, size):
    ours, theirs = pair
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours.forward_features(x), theirs.forward_features(x), rtol=0, atol=ATOL)
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=ATOL)
        mine = ours.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
        expected = theirs.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
    for a, b in zip(mine, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=ATOL)


def test_features_only_and_dense_features(pair):
    ours, _ = pair
    x = torch.randn(1, 3, 64, 48)
    features = vitzoo.create(NAME, pretrained=False, features_only=True, out_indices=(0, 1), **SMALL)
    assert [tuple(f.shape) for f in features(x)] == [(1, 64, 4, 3)] * 2
    with torch.no_grad():
        maps = vitzoo.dense_features(ours, x)
        last = ours.forward_intermediates(x, indices=1, norm=True, intermediates_only=True)[-1]
    torch.testing.assert_close(maps, last)


@pytest.mark.slow
def test_optimize_and_torch_export(pair, tmp_path, monkeypatch):
    from vitzoo.inference import timing

    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(timing, "ROUND_S", 0.005)
    ours, _ = pair
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        expected = ours(x)
    fast = vitzoo.optimize(ours, x, candidates=["eager-explicit"], cache=False)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), expected, rtol=0, atol=ATOL)
    program = deploy.load_program(deploy.export(ours, tmp_path / "sapiens2.pt2"))
    with torch.no_grad():
        torch.testing.assert_close(program(x), expected, rtol=0, atol=ATOL)


@pytest.mark.slow
def test_onnx(pair, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    ours, _ = pair
    path = deploy.export_onnx(ours, tmp_path / "sapiens2.onnx")
    x = torch.randn(2, 3, 64, 48)
    (got,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": x.numpy()})
    with torch.no_grad():
        assert abs(torch.from_numpy(got) - ours(x)).max().item() <= 1e-4


@pytest.fixture
def tiny_sapiens2():
    """A tiny Sapiens2 for 28 px digits: patch 4, two blocks (the second grouped), ten classes; registered
    for one test (the registry is restored afterwards)."""
    vitzoo.list_models()
    saved = registry.snapshot()
    fields = {**SMALL, "embed_dim": 32, "img_size": 28, "patch_size": 4, "in_chans": 1, "num_classes": 10}
    vitzoo.register("test_tiny_sapiens2", base=NAME, **fields)
    yield "test_tiny_sapiens2"
    registry.restore(saved)


@pytest.mark.slow
def test_finetune_loss_falls_and_pictures_draw(tiny_sapiens2, mnist_dir: Path, tmp_path):
    from PIL import Image

    from tests.commands.training import finetune

    out = tmp_path / "run"
    args = ["--data", "mnist", "--data-dir", str(mnist_dir), "--no-download", "--epochs", "2", "--batch-size", "32"]
    assert finetune(tiny_sapiens2, *args, "--lr", "2e-3", "--out", str(out), "--no-progress") == 0
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [e["train_loss"] for e in epochs if "train_loss" in e]
    assert len(losses) == 2 and losses[1] < losses[0]
    digit = tmp_path / "digit.png"
    Image.fromarray((torch.rand(28, 28) * 255).to(torch.uint8).numpy(), mode="L").save(digit)
    for kind in ("attention", "pca"):
        picture = tmp_path / f"{kind}.png"
        extra = ["--layer", "1"] if kind == "attention" else [str(digit), "--layer", "1"]
        assert main(["viz", kind, tiny_sapiens2, *extra, "--weights", str(out / "best"), "--out", str(picture)]) == 0
        assert picture.stat().st_size > 0
