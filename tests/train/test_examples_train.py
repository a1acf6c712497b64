"""examples/finetune_mnist.py and examples/finetune_folder.py run as documented (small settings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo.data import load_mnist_sample, write_idx

pytestmark = pytest.mark.slow  # subprocesses: `pytest -m "not slow"` skips them

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(*argv: str, cwd: Path) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_finetune_mnist_example(tmp_path: Path) -> None:
    sample = load_mnist_sample()
    data = tmp_path / "mnist"
    data.mkdir()
    write_idx(data / "train-images-idx3-ubyte.gz", sample.train.images[:256, 0])
    write_idx(data / "train-labels-idx1-ubyte.gz", sample.train.labels[:256].to(torch.uint8))
    write_idx(data / "t10k-images-idx3-ubyte", sample.val.images[:100, 0])  # plain and .gz mixed
    write_idx(data / "t10k-labels-idx1-ubyte", sample.val.labels[:100].to(torch.uint8))
    out = _run(
        str(EXAMPLES / "finetune_mnist.py"),
        "--model",
        "vit_mnist_tiny",
        "--data",
        "mnist",
        "--data-dir",
        str(data),
        "--epochs",
        "1",
        "--out",
        "run",
        "--threads",
        "1",
        cwd=tmp_path,
    )
    assert "finished: best test accuracy" in out and "run directory run" in out
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 1


def test_finetune_folder_example_from_local_pretrained_weights(tmp_path: Path) -> None:
    # "Pretrained" weights: a DeiT-Ti saved at 224 px with 1000 classes; the example fine-tunes it at
    # 32 px on 2 classes (head replaced, position embedding resampled).
    torch.manual_seed(0)
    vitzoo.create("deit_ti16").save_pretrained(tmp_path / "deit")
    for c, color in enumerate([(230, 30, 30), (30, 30, 230)]):
        for i in range(5):
            path = tmp_path / "images" / f"class{c}" / f"{i}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (50, 40 + i), color).save(path)
    out = _run(
        str(EXAMPLES / "finetune_folder.py"),
        "images",
        "--model",
        "deit_ti16",
        "--weights",
        str(tmp_path / "deit"),
        "--img-size",
        "32",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--out",
        "run",
        "--threads",
        "1",
        cwd=tmp_path,
    )
    assert "classes ['class0', 'class1']" in out
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["model_config"]["img_size"] == 32 and run["train_images"] == 8 and run["val_images"] == 2
    assert run["train_config"]["layer_decay"] == 0.75  # the pretrained recipe
