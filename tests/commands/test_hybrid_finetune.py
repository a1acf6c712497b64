"""A tiny copy of a hybrid release (MobileCLIP's MCI stem, BiT's ResNet root) fine-tunes through
`vitzoo finetune` (the loss falls), and `vitzoo viz attention` / `viz pca` draw the trained model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import vitzoo
from vitzoo import registry
from vitzoo.cli import main

from .training import finetune

TINY = dict(embed_dim=32, depth=2, num_heads=2, img_size=32, num_classes=10)


@pytest.fixture
def tiny_hybrids() -> Iterator[None]:
    vitzoo.list_models()  # the built-in zoo registers itself on first use: before the copy
    saved = registry.snapshot()
    vitzoo.register("test_tiny_mci", base="vit_b_mci", **TINY)
    vitzoo.register("test_tiny_r", base="vit_ti_r_s16_p8", **TINY)
    yield
    registry.restore(saved)


@pytest.mark.usefixtures("tiny_hybrids", "one_thread")
@pytest.mark.slow  # fine-tunes end to end: CI runs them with -m slow
@pytest.mark.parametrize("name", ["test_tiny_mci", "test_tiny_r"])
def test_finetune_lowers_the_loss_and_the_pictures_draw(name, mnist_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    args = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download", "--batch-size", "32")
    assert finetune(name, *args, "--epochs", "2", "--lr", "3e-3", "--out", str(out), "--no-progress") == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["train_loss"] < records[0]["train_loss"]
    weights = str(out / "best")
    png = tmp_path / "attention.png"
    assert main(["viz", "attention", name, "--weights", weights, "--out", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    skimage_data = pytest.importorskip("skimage.data")
    from PIL import Image

    photo = tmp_path / "astronaut.png"
    Image.fromarray(skimage_data.astronaut()).save(photo)
    png = tmp_path / "pca.png"
    assert main(["viz", "pca", name, str(photo), "--weights", weights, "--size", "128", "--out", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
