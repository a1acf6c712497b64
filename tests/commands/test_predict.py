"""`vitzoo predict` printing a table or --json (tests/test_predict.py covers --output FILE)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo

from .helpers import digit_images, run


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
