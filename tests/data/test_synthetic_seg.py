"""vitzoo/data/synthetic_seg.py: the digits-on-photos dataset, deterministic from its seed, in the
plain layout, its masks the digits' thresholded pixels; a clear error without scikit-image."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("skimage", reason="scikit-image (a dev dependency) provides the photos")

from vitzoo.data import load_mnist_sample
from vitzoo.data.masks import load_segmentation
from vitzoo.data.synthetic_seg import (
    CLASSES,
    TRAIN_PHOTOS,
    VAL_PHOTOS,
    SceneBuildError,
    build_digit_scenes,
    digit_tiles,
)

SMALL = {"train": 2, "val": 2, "size": (40, 48), "scale": (1.0, 1.2)}


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_scenes_are_a_plain_layout_dataset_with_digit_classes(digit_scenes):
    data = load_segmentation(digit_scenes)
    assert data.layout == "plain" and data.classes == CLASSES and (len(data.train), len(data.val)) == (8, 4)
    labels = set()
    for sample in data.train + data.val:
        image, mask = data.read_pair(sample)
        assert image.shape == (3, 48, 64)
        labels |= set(mask.unique().tolist())
    assert 0 in labels and len(labels - {0}) >= 4  # the background and several digits


def test_a_digit_mask_is_where_the_digit_colours_the_photo(digit_scenes):
    """Inside a digit's mask the pixels are the digit's colour, brighter than the ground around it."""
    data = load_segmentation(digit_scenes)
    for sample in data.val:
        image, mask = data.read_pair(sample)
        luma = (image.float() * torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)).sum(0)
        digits = mask > 0
        assert luma[digits].mean() > luma[~digits].mean() + 40


def test_the_same_seed_builds_the_same_bytes_and_another_seed_other_scenes(tmp_path):
    first = _files(build_digit_scenes(tmp_path / "a", seed=3, **SMALL))
    assert first == _files(build_digit_scenes(tmp_path / "b", seed=3, **SMALL))
    assert first != _files(build_digit_scenes(tmp_path / "c", seed=4, **SMALL))
    assert (tmp_path / "a" / "classes.txt").read_text().split() == list(CLASSES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]  # nothing left of the builds


@pytest.mark.slow  # end to end in seconds: CI's -m slow pass
def test_validation_scenes_use_other_photos_and_other_digits():
    assert not set(TRAIN_PHOTOS) & set(VAL_PHOTOS)
    tiles, sample = digit_tiles("val"), load_mnist_sample().val
    assert tiles.images.shape == (len(sample), 1, 28, 28) and torch.equal(tiles.labels, sample.labels)


def test_building_refuses_a_folder_that_holds_files_and_bad_sizes(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "mine.txt").write_text("keep")
    with pytest.raises(SceneBuildError, match="not an empty folder"):
        build_digit_scenes(tmp_path / "x", **SMALL)
    with pytest.raises(SceneBuildError, match=r"size=\(20, 48\) is invalid"):
        build_digit_scenes(tmp_path / "y", **{**SMALL, "size": (20, 48)})
    assert (tmp_path / "x" / "mine.txt").read_text() == "keep"


def test_without_scikit_image_the_builder_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "skimage", None)
    with pytest.raises(SceneBuildError, match=r"needs scikit-image.*pip install scikit-image"):
        build_digit_scenes(tmp_path / "s", **SMALL)
    assert not (tmp_path / "s").exists()


def test_the_mask_png_is_grey_class_indices(digit_scenes):
    with Image.open(digit_scenes / "train" / "masks" / "scene_0000.png") as img:
        assert img.mode == "L" and set(np.unique(np.array(img))) <= set(range(11))
