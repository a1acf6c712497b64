"""vitzoo/data/folder.py: ImageFolder trees decoded once, splits, corrupt images, bad layouts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from vitzoo.data import CorruptImageError, FolderDataError, load_data, load_image_folder, store_size_for


def _image(path: Path, color: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)


def _tree(root: Path, per_class: int = 5, classes: tuple[str, ...] = ("cat", "dog")) -> None:
    for c, name in enumerate(classes):
        for i in range(per_class):
            _image(root / name / f"{i}.png", (200 * c, 50 + 10 * i, 100))


def test_train_val_folders(tmp_path: Path) -> None:
    _tree(tmp_path / "train", per_class=4)
    _tree(tmp_path / "val", per_class=2)
    splits = load_image_folder(tmp_path, store_size=16)
    assert splits.classes == ("cat", "dog") and splits.kind == "natural"
    assert splits.train.images.shape == (8, 3, 16, 16) and splits.train.images.dtype == torch.uint8
    assert splits.val.class_counts() == [2, 2]
    # decoded content: class "dog" images are red (200 in the R channel), "cat" ones are not
    assert splits.train.images[splits.train.labels == 1, 0].float().mean() > 190
    assert splits.train.images[splits.train.labels == 0, 0].float().mean() < 10


def test_single_folder_seeded_stratified_split(tmp_path: Path) -> None:
    _tree(tmp_path, per_class=10)
    a = load_image_folder(tmp_path, store_size=8, val_split=0.3, seed=1)
    b = load_image_folder(tmp_path, store_size=8, val_split=0.3, seed=1)
    c = load_image_folder(tmp_path, store_size=8, val_split=0.3, seed=2)
    assert a.val.class_counts() == [3, 3] and a.train.class_counts() == [7, 7]
    assert torch.equal(a.val.images, b.val.images)
    assert not torch.equal(a.val.images, c.val.images)


def test_corrupt_image_skipped_with_warning_or_error_when_strict(tmp_path: Path) -> None:
    _tree(tmp_path / "train", per_class=3)
    _tree(tmp_path / "val", per_class=2)
    (tmp_path / "train" / "cat" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    # one warning names the file, one counts what the split lost
    with (
        pytest.warns(UserWarning, match="unreadable image .*broken.jpg"),
        pytest.warns(UserWarning, match=r"train: skipped 1 unreadable image\(s\) of 7"),
    ):
        splits = load_image_folder(tmp_path, store_size=8)
    assert len(splits.train) == 6
    with pytest.raises(CorruptImageError, match=r"broken\.jpg"):
        load_image_folder(tmp_path, store_size=8, strict=True)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda r: None, "does not exist"),
        (lambda r: r.mkdir(), "no class subfolders"),
        (lambda r: _tree(r, classes=("only",)), "only one class"),
        (lambda r: (_tree(r), (r / "empty").mkdir()), "'empty'.*hold no images"),
        (lambda r: _tree(r / "train"), "no val/ folder.*--val-split"),
        (lambda r: _tree(r / "val"), "val/ folder but no train/"),
        (lambda r: (_tree(r / "train"), _tree(r / "val", classes=("cat", "cow"))), "same class folders.*dog.*cow"),
    ],
)
def test_bad_layouts_raise_clear_errors(tmp_path: Path, make, message: str) -> None:
    root = tmp_path / "images"
    make(root)
    with pytest.raises(FolderDataError, match=message):
        load_image_folder(root, store_size=8)


def test_load_data_folder_needs_a_path() -> None:
    with pytest.raises(ValueError, match="needs a path"):
        load_data("folder")


def test_store_size_follows_crop_pct() -> None:
    assert store_size_for(224, 0.875) == 256 and store_size_for(28, 1.0) == 28
