"""`vitzoo features`: the shipped MNIST sample and an image folder, end to end, in-process."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo.data import eval_transform, load_mnist_sample
from vitzoo.probe import embed, load_features

from .helpers import optimize_lines, refuse_optimize, run


@pytest.fixture
def tiny_weights(tmp_path, one_thread):
    torch.manual_seed(0)
    vitzoo.save_pretrained(vitzoo.create("vit_mnist_tiny"), tmp_path / "w")
    return str(tmp_path / "w")


def assert_each_row_is_its_file(feats, weights):
    """Each row's embedding is that of the file it names, through the evaluation preprocessing, and
    its label the file's class folder."""
    model = vitzoo.create("vit_mnist_tiny", weights=weights).eval()
    transform = eval_transform(model)
    with torch.no_grad():
        expected = torch.cat([embed(model, transform(Image.open(n)).unsqueeze(0)) for n in feats.names or []])
    torch.testing.assert_close(feats.features, expected, atol=1e-5, rtol=1e-5)
    assert [n.split("/")[-2] for n in feats.names or []] == [feats.classes[i] for i in feats.labels]


def test_mnist_sample_val_split(capsys, tmp_path, tiny_weights):
    out = tmp_path / "mnist.safetensors"
    argv = ["features", "vit_mnist_tiny", "mnist-sample", "--weights", tiny_weights, "--out", str(out)]
    code, stdout, err = run(capsys, *argv, "--split", "val", "--output", "cls", "--dtype", "fp32", "--no-progress")
    assert code == 0, err
    assert "wrote" in stdout and "9-dim cls features of 1000 val images" in stdout
    feats = load_features(out)
    assert feats.features.shape == (1000, 9) and feats.present_splits() == ["val"]
    assert torch.equal(feats.labels, load_mnist_sample().val.labels) and feats.names is None
    settings = feats.settings
    assert (settings["model"], settings["weights"], settings["output"], settings["dtype"]) == (
        "vit_mnist_tiny",
        tiny_weights,
        "cls",
        "fp32",
    )
    assert settings["preprocessing"]["size"] == [32, 32] and settings["dataset"]["name"] == "mnist-sample"
    assert not list(tmp_path.glob(".mnist.safetensors.partial-*"))  # the shards are gone


def test_image_folder_features_equal_the_eval_transform_of_each_file(capsys, tmp_path, tiny_weights):
    rng = np.random.default_rng(0)
    for label in ("ant", "bee"):
        (tmp_path / "imgs" / label).mkdir(parents=True)
        for i in range(3):
            pixels = rng.integers(0, 256, (30, 41, 3), dtype=np.uint8)  # not square, not the model's size
            Image.fromarray(pixels).save(tmp_path / "imgs" / label / f"{i}.png")
    out = tmp_path / "folder.safetensors"
    code, _, err = run(
        capsys,
        *("features", "vit_mnist_tiny", "folder", str(tmp_path / "imgs"), "--weights", tiny_weights),
        *("--out", str(out), "--val-split", "0.34", "--dtype", "fp32", "--workers", "0", "--no-progress"),
    )
    assert code == 0, err
    feats = load_features(out)
    assert feats.present_splits() == ["train", "val"] and len(feats) == 6 and feats.classes == ("ant", "bee")
    assert_each_row_is_its_file(feats, tiny_weights)


def test_bad_usage(capsys, tmp_path, tiny_weights):
    code, _, err = run(capsys, "features", "vit_mnist_tiny", "mnist-sample", "--out", str(tmp_path / "f"))
    assert code == 2 and "has no pretrained weights; pass --weights" in err
    argv = ("features", "vit_mnist_tiny", "mnist-sample", "--weights", tiny_weights, "--out", str(tmp_path / "f"))
    code, _, err = run(capsys, *argv, "--block", "1")
    assert code == 1 and "block needs output 'cls' or 'mean'" in err
    code, _, err = run(capsys, *argv[:-1], str(tmp_path))
    assert code == 2 and "is a directory" in err


def _write_images(folder, names, seed):
    rng = np.random.default_rng(seed)
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / name)


def test_a_stopped_extraction_of_a_folder_changed_since_starts_afresh(capsys, tmp_path, tiny_weights, monkeypatch):
    from vitzoo.probe import extract as extract_module

    imgs = tmp_path / "imgs"
    _write_images(imgs, [f"{label}/{i}.png" for label in ("ant", "bee") for i in range(6)], seed=0)
    out = tmp_path / "folder.safetensors"
    argv = ("features", "vit_mnist_tiny", "folder", str(imgs), "--weights", tiny_weights, "--out", str(out))
    argv += ("--val-split", "0.25", "--batch-size", "2", "--dtype", "fp32", "--workers", "0", "--no-progress")
    monkeypatch.setattr(extract_module, "SHARD_IMAGES", 4)  # a shard every two batches
    write_shard = extract_module.write_safetensors

    def stop_after_a_shard(*args, **kwargs):
        write_shard(*args, **kwargs)
        raise KeyboardInterrupt  # what Ctrl-C raises

    monkeypatch.setattr(extract_module, "write_safetensors", stop_after_a_shard)
    code, _, err = run(capsys, *argv)
    assert code == 130 and "interrupted" in err
    (stale,) = tmp_path.glob(".folder.safetensors.partial-*")
    assert len(list(stale.glob("train-*.safetensors"))) == 1
    monkeypatch.setattr(extract_module, "write_safetensors", write_shard)

    for name in ("ant/0.png", "ant/1.png", "bee/2.png"):  # removed, and others added
        (imgs / name).unlink()
    _write_images(imgs, ["ant/0b.png", "bee/7.png", "bee/8.png"], seed=1)
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    assert "discarded the shards of a stopped extraction" in err and "the dataset's files" in err
    assert not list(tmp_path.glob(".folder.safetensors.partial-*"))
    feats = load_features(out)
    assert sorted(feats.names or []) == sorted(str(p) for p in imgs.glob("*/*.png"))
    assert_each_row_is_its_file(feats, tiny_weights)


def test_a_tuned_run_says_what_it_chose_and_embeds_as_no_optimize(
    capsys, tmp_path, tiny_weights, monkeypatch, tune_short_runs
):
    rng = np.random.default_rng(0)
    for label in ("ant", "bee"):
        (tmp_path / "imgs" / label).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8)).save(tmp_path / "imgs" / label / f"{i}.png")
    argv = [
        "features",
        "vit_mnist_tiny",
        "folder",
        str(tmp_path / "imgs"),
        "--weights",
        tiny_weights,
        "--dtype",
        "fp32",
    ]
    argv += ["--val-split", "0.34", "--batch-size", "3", "--workers", "0", "--output", "mean"]
    code, _, err = run(capsys, *argv, "--out", str(tmp_path / "fast.safetensors"), "--no-progress")
    assert code == 0, err
    assert optimize_lines(err) == []  # --no-progress keeps it quiet
    code, _, err = run(capsys, *argv, "--out", str(tmp_path / "fast.safetensors"), "--no-resume")
    assert code == 0, err
    (line,) = optimize_lines(err)
    assert "optimize: eager on " in line and ", batch 3, " in line
    assert tune_short_runs == [(3, 1, 32, 32)] * 6  # 4 train, 2 val images: 3 batches (2 padded), twice
    refuse_optimize(monkeypatch)
    code, _, err = run(capsys, *argv, "--out", str(tmp_path / "plain.safetensors"), "--no-optimize")
    assert code == 0 and optimize_lines(err) == [], err
    fast, plain = load_features(tmp_path / "fast.safetensors"), load_features(tmp_path / "plain.safetensors")
    assert fast.names == plain.names and len(fast) == 6
    torch.testing.assert_close(fast.features, plain.features, atol=1e-6, rtol=1e-5)
