"""`vitzoo segment MODEL DATA --out RUN`: the probe from the command line, in-process: --json's
three metrics, the predicted masks and the picture, and one error line naming a bad file."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo

from .helpers import optimize_lines, refuse_optimize, run

FAST = ("--crop", "32", "--steps", "5", "--batch-size", "4", "--threads", "1", "--dtype", "fp32", "--no-progress")


@pytest.fixture
def tiny_weights(tmp_path):
    torch.manual_seed(0)
    vitzoo.save_pretrained(vitzoo.create("vit_mnist_tiny"), tmp_path / "w")
    return str(tmp_path / "w")


def test_json_prints_the_metrics_and_the_run_holds_predictions_and_a_picture(
    capsys, tmp_path, digit_scenes, tiny_weights
):
    argv = ["segment", "vit_mnist_tiny", str(digit_scenes), "--weights", tiny_weights, "--out", str(tmp_path / "run")]
    code, out, err = run(capsys, *argv, *FAST, "--predictions", str(tmp_path / "pred"), "--json")
    assert code == 0, err
    metrics = json.loads(out)
    assert set(metrics) == {"miou", "pixel_accuracy", "per_class_iou"}
    assert list(metrics["per_class_iou"]) == ["background", *map(str, range(10))]
    assert 0 <= metrics["miou"] <= 1 and 0 <= metrics["pixel_accuracy"] <= 1
    names = sorted(p.name for p in (tmp_path / "pred").iterdir())
    assert names == sorted(p.name for p in (digit_scenes / "val" / "images").iterdir())
    with Image.open(tmp_path / "pred" / names[0]) as mask:
        assert mask.mode == "L" and mask.size == (64, 48)
    report = json.loads((tmp_path / "run" / "segment.json").read_text())
    assert report["miou"] == metrics["miou"] and report["model"] == {"name": "vit_mnist_tiny", "weights": tiny_weights}
    assert (tmp_path / "run" / "examples.png").is_file()


def test_the_table_names_every_class_and_the_run(capsys, tmp_path, digit_scenes, tiny_weights):
    argv = ["segment", "vit_mnist_tiny", str(digit_scenes), "--weights", tiny_weights, "--out", str(tmp_path / "run")]
    code, out, err = run(capsys, *argv, *FAST, "--eval-mode", "whole", "--layers", "2")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["class", "IoU", "%"] and "background" in out
    assert "mIoU" in out and f"wrote {tmp_path / 'run'}" in out


def test_a_bad_mask_is_one_error_line_naming_it(capsys, tmp_path, digit_scenes, tiny_weights):
    data = shutil.copytree(digit_scenes, tmp_path / "scenes")
    bad = data / "val" / "masks" / "scene_0002.png"
    Image.fromarray(np.zeros((40, 64), dtype=np.uint8)).save(bad)
    argv = ["segment", "vit_mnist_tiny", str(data), "--weights", tiny_weights, "--out", str(tmp_path / "run")]
    code, out, err = run(capsys, *argv, *FAST)
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"vitzoo: error: mask {bad} is 64x40 pixels but its image {data / 'val' / 'images' / 'scene_0002.png'} "
        "is 64x48; expected a mask of the image's size"
    ]
    assert not (tmp_path / "run").exists()


def test_bad_arguments_are_usage_errors_naming_the_flag(capsys, tmp_path, digit_scenes):
    for flag in ("--crop", "--stride", "--size"):  # sides of images: 1 up to what any ViT can take
        for value in ("0", "100000"):
            argv = ["segment", "vit_mnist_tiny", str(digit_scenes), "--out", str(tmp_path), flag, value]
            code, _, err = run(capsys, *argv)
            assert code == 2 and f"{flag}: expected" in err and f"got '{value}'" in err, err
    code, _, err = run(capsys, "segment", "vit_mnist", str(digit_scenes), "--out", str(tmp_path / "r"), *FAST)
    assert code == 2 and "model 'vit_mnist' has no pretrained weights; pass --weights" in err


def test_a_tuned_run_says_what_it_chose_and_scores_as_no_optimize(
    capsys, tmp_path, digit_scenes, tiny_weights, monkeypatch, tune_short_runs
):
    argv = ["segment", "vit_mnist_tiny", str(digit_scenes), "--weights", tiny_weights, *FAST, "--json"]
    code, out, err = run(capsys, *argv, "--out", str(tmp_path / "fast"))
    assert code == 0, err
    assert optimize_lines(err) == []  # --no-progress keeps it quiet
    fast = json.loads(out)
    assert (fast["optimize"]["choice"], fast["optimize"]["batch"]) == ("eager", 4)
    assert tune_short_runs and set(tune_short_runs) == {(4, 1, 32, 32)}  # windows of --crop 32, 4 a batch
    refuse_optimize(monkeypatch)
    code, out, err = run(capsys, *argv, "--out", str(tmp_path / "plain"), "--no-optimize")
    assert code == 0, err
    plain = json.loads(out)
    # the same maps within fp32's rounding (a padded batch may take another kernel), so the same head
    assert fast.pop("optimize") and list(fast["per_class_iou"]) == list(plain["per_class_iou"])
    for key in ("miou", "pixel_accuracy"):
        assert fast[key] == pytest.approx(plain[key], abs=1e-3)


def test_num_classes_is_bounded_by_the_ignore_index(capsys, tmp_path, digit_scenes):
    for count in ("1000000000", "300", "0"):
        argv = ["segment", "vit_mnist_tiny", str(digit_scenes), "--out", str(tmp_path), "--num-classes", count]
        code, _, err = run(capsys, *argv)
        assert code == 2, err
        assert f"--num-classes: expected a class count in [1, 254] (255 marks ignored pixels), got '{count}'" in err


def test_predictions_into_the_data_s_own_folders_are_refused(capsys, tmp_path, digit_scenes, tiny_weights):
    masks = digit_scenes / "val" / "masks"
    before = {p.name: p.read_bytes() for p in masks.iterdir()}
    argv = ["segment", "vit_mnist_tiny", str(digit_scenes), "--weights", tiny_weights, *FAST]
    code, out, err = run(capsys, *argv, "--out", str(tmp_path / "run"), "--predictions", str(masks))
    assert code == 1 and out == "", err
    assert err.startswith(f"vitzoo: error: --predictions {masks} and the data's folder {masks} are the same or one")
    assert {p.name: p.read_bytes() for p in masks.iterdir()} == before
    assert not (tmp_path / "run").exists()
