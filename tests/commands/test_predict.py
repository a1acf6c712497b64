"""`vitzoo predict` printing a table or --json (tests/test_predict.py covers --output FILE)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo

from .helpers import digit_images, optimize_lines, refuse_optimize, run


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


def _saved(tmp_path, **overlay):
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist_tiny", pretrained_cfg_overlay=overlay or None).eval()
    model.save_pretrained(tmp_path / "weights")
    return model


def test_weights_with_nan_are_refused_naming_the_tensor(tmp_path, capsys):
    model = _saved(tmp_path)
    with torch.no_grad():
        model.head.weight[3, 0] = float("nan")
        model.blocks[0].norm1.bias[0] = float("inf")
    model.save_pretrained(tmp_path / "weights")
    image = digit_images(tmp_path)[0]
    for extra in ([], ["--json"], ["--output", str(tmp_path / "p.jsonl")]):
        code, out, err = run(
            capsys, "predict", "vit_mnist_tiny", str(image), "--weights", str(tmp_path / "weights"), *extra
        )
        assert code == 1 and out == "", err
        # loading warns once; predict refuses, naming both tensors
        assert err.count("warning:") == 1 and err.count("error:") == 1
        assert "NaN or infinite values in blocks.0.norm1.bias, head.weight" in err.splitlines()[-1]
    assert not (tmp_path / "p.jsonl").exists()


def test_fp16_cast_that_would_overflow_is_refused(tmp_path, capsys):
    model = _saved(tmp_path)
    with torch.no_grad():
        model.head.weight[0, 0] = 1e5  # beyond fp16's 65504: it would become inf
    model.save_pretrained(tmp_path / "weights")
    image = digit_images(tmp_path)[0]
    code, _, err = run(
        capsys, "predict", "vit_mnist_tiny", str(image), "--weights", str(tmp_path / "weights"), "--dtype", "fp16"
    )
    assert code == 1 and err.count("\n") == 1
    assert "cannot cast the model to fp16: head.weight hold values beyond its range (largest 65504)" in err
    code, _, err = run(
        capsys, "predict", "vit_mnist_tiny", str(image), "--weights", str(tmp_path / "weights"), "--dtype", "bf16"
    )
    assert code == 0, err  # bf16 has fp32's range


def test_control_characters_in_labels_are_escaped_in_the_table_not_in_json(tmp_path, capsys):
    labels = [f"c{i}" for i in range(10)]
    labels = ["\x1b[2J\x1b]0;pwned\x07evil", "back\rspace\u202e", *labels[2:]]
    model = _saved(tmp_path, label_names=labels)
    with torch.no_grad():  # every image predicts classes 0 and 1 first
        model.head.bias.copy_(torch.tensor([50.0, 40.0] + [0.0] * 8))
        model.head.weight.zero_()
    model.save_pretrained(tmp_path / "weights")
    image = digit_images(tmp_path)[0]
    argv = ("predict", "vit_mnist_tiny", str(image), "--weights", str(tmp_path / "weights"), "--topk", "2")
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b[2J\\x1b]0;pwned\\x07evil" in out and "back\\rspace\\u202e" in out
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0 and [p["label"] for p in json.loads(out)[0]["predictions"]] == labels[:2]


def test_an_image_piped_on_standard_input_is_read_once(tmp_path, capsys, monkeypatch):
    import io
    import os

    _saved(tmp_path)
    image = digit_images(tmp_path)[0]
    weights = ("--weights", str(tmp_path / "weights"))
    code, out, _ = run(capsys, "predict", "vit_mnist_tiny", str(image), *weights, "--json")
    assert code == 0
    expected = json.loads(out)[0]["predictions"]

    def piped() -> str:  # a pipe holding the image, its writer closed: what `cat img.png |` gives
        read, write = os.pipe()
        os.write(write, image.read_bytes())
        os.close(write)
        return f"/dev/fd/{read}"

    code, out, err = run(capsys, "predict", "vit_mnist_tiny", piped(), *weights, "--json")
    assert code == 0, err
    assert json.loads(out)[0]["predictions"] == expected
    output = tmp_path / "p.jsonl"
    code, _, err = run(capsys, "predict", "vit_mnist_tiny", piped(), *weights, "--output", str(output), "--strict")
    assert code == 0, err
    assert json.loads(output.read_text())["predictions"] == expected
    stdin = io.TextIOWrapper(io.BytesIO(image.read_bytes()))
    monkeypatch.setattr("sys.stdin", stdin)
    code, out, err = run(capsys, "predict", "vit_mnist_tiny", "-", *weights, "--json")
    assert code == 0, err
    assert json.loads(out) == [{"image": "-", "predictions": expected}]


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_with_no_writer_is_an_error_not_a_hang(tmp_path, capsys):
    import os

    _saved(tmp_path)
    os.mkfifo(tmp_path / "x.png")
    code, _, err = run(
        capsys, "predict", "vit_mnist_tiny", str(tmp_path / "x.png"), "--weights", str(tmp_path / "weights")
    )
    assert code == 1 and "nothing was written to it (an empty pipe or FIFO)" in err


def test_a_tuned_run_says_what_it_chose_and_predicts_as_no_optimize(tmp_path, capsys, monkeypatch, tune_short_runs):
    _saved(tmp_path)
    images = [*digit_images(tmp_path), tmp_path / "digit2.png"]
    images[2].write_bytes(images[0].read_bytes())
    argv = ["predict", "vit_mnist_tiny", *map(str, images), "--weights", str(tmp_path / "weights"), "--batch-size", "2"]
    code, out, err = run(capsys, *argv, "--output", str(tmp_path / "fast.jsonl"), "--json")
    assert code == 0, err
    (line,) = optimize_lines(err)
    assert "optimize: eager on " in line and ", batch 2, " in line and "img/s" in line
    assert tune_short_runs == [(2, 1, 32, 32)] * 2  # the last batch, of 1 image, padded to 2
    chosen = json.loads(out)["optimize"]
    assert (chosen["choice"], chosen["batch"]) == ("eager", 2) and f"{chosen['img_per_s']:.1f} img/s" in line
    refuse_optimize(monkeypatch)
    code, out, err = run(capsys, *argv, "--output", str(tmp_path / "plain.jsonl"), "--json", "--no-optimize")
    assert code == 0, err
    assert "optimize" not in json.loads(out) and optimize_lines(err) == []
    fast, plain = (
        [json.loads(r) for r in (tmp_path / f).read_text().splitlines()] for f in ("fast.jsonl", "plain.jsonl")
    )
    assert [r["image"] for r in fast] == [r["image"] for r in plain] == list(map(str, images))
    for a, b in zip(fast, plain):
        assert [p["index"] for p in a["predictions"]] == [p["index"] for p in b["predictions"]]
        assert [p["probability"] for p in a["predictions"]] == pytest.approx(
            [p["probability"] for p in b["predictions"]], abs=1e-6
        )
