"""A tiny copy of BEiT (relative position tables, q/v biases, LayerScale, mean pooling) through the
`vitzoo` command: `finetune` on the MNIST sample lowers the loss, `viz attention` draws its
attention and `viz pca` its patch features."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo import registry
from vitzoo.cli import main

from .training import finetune

TINY_BEIT = dict(patch_size=7, embed_dim=16, depth=2, num_heads=2)


@pytest.fixture
def tiny_beit() -> Iterator[None]:
    vitzoo.list_models()  # the built-in zoo registers itself on first use: before the copy
    saved = registry.snapshot()
    vitzoo.register("test_tiny_beit", base="beit_b16", img_size=28, in_chans=1, num_classes=10, **TINY_BEIT)
    vitzoo.register("test_tiny_beit_rgb", base="beit_b16", img_size=56, **TINY_BEIT)
    yield
    registry.restore(saved)


@pytest.mark.slow  # a fine-tune end to end: CI runs it with -m slow
@pytest.mark.usefixtures("tiny_beit", "one_thread")
def test_finetune_lowers_the_loss_then_viz_draws_it(mnist_dir: Path, tmp_path: Path, capsys, png_size) -> None:
    out = tmp_path / "run"
    data = ("--data", "mnist", "--data-dir", str(mnist_dir), "--no-download")
    argv = ("--epochs", "3", "--batch-size", "32", "--lr", "3e-3", "--out", str(out), "--no-progress")
    assert finetune("test_tiny_beit", *data, *argv) == 0
    losses = [json.loads(line)["train_loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert vitzoo.create("test_tiny_beit", weights=out / "best").config.rel_pos_table
    capsys.readouterr()

    picture = tmp_path / "attention.png"
    argv2 = ["viz", "attention", "test_tiny_beit", "--weights", str(out / "best"), "--out", str(picture)]
    assert main(argv2) == 0
    assert png_size(picture)[0] > 0

    from PIL import Image

    photo = tmp_path / "photo.png"
    Image.fromarray((torch.rand(56, 56, 3) * 255).to(torch.uint8).numpy()).save(photo)
    pca = tmp_path / "pca.png"
    assert (
        main(["viz", "pca", "test_tiny_beit_rgb", str(photo), "--size", "56", "--layer", "0", "--out", str(pca)]) == 0
    )
    assert png_size(pca)[0] > 0
