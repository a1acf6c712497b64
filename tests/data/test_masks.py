"""vitzoo/data/masks.py: the four segmentation layouts, read offline, and one error naming the file
for each kind of bad file (wrong size, values that are no class, missing partners, palette vs grey)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitzoo.data.masks import IGNORE_INDEX, VOC_CLASSES, MaskDataError, find_layout, load_segmentation


def _grey(values: np.ndarray) -> Image.Image:
    return Image.fromarray(values.astype(np.uint8))


def _palette(values: np.ndarray) -> Image.Image:
    img = Image.fromarray(values.astype(np.uint8)).convert("P")  # a grey image's values as palette indices
    img.putpalette([c for i in range(256) for c in (i, 255 - i, (7 * i) % 256)])
    assert np.array_equal(np.array(img), values)
    return img


def _mask(seed: int, size: tuple[int, int] = (6, 8), classes: int = 3) -> np.ndarray:
    values = np.random.default_rng(seed).integers(0, classes, size)
    values[0, 0] = IGNORE_INDEX
    return values


def _image(size: tuple[int, int] = (6, 8)) -> Image.Image:
    return Image.fromarray(np.full((*size, 3), 90, dtype=np.uint8))


def plain(root: Path, pairs: int = 2, classes: str | None = None) -> Path:
    for split in ("train", "val"):
        for folder in ("images", "masks"):
            (root / split / folder).mkdir(parents=True)
        for i in range(pairs):
            _image().save(root / split / "images" / f"im{i}.jpg")
            _grey(_mask(i)).save(root / split / "masks" / f"im{i}.png")
    if classes is not None:
        (root / "classes.txt").write_text(classes)
    return root


def test_the_plain_layout_pairs_images_and_masks_by_name(tmp_path):
    data = load_segmentation(plain(tmp_path, classes="sky\nroad\ncar\n"))
    assert data.layout == "plain" and data.classes == ("sky", "road", "car")
    assert [s.name for s in data.train] == ["im0", "im1"] and len(data.val) == 2
    image, mask = data.read_pair(data.train[1])
    assert image.shape == (3, 6, 8) and mask.shape == (6, 8)
    assert np.array_equal(mask.numpy(), _mask(1))


def test_without_classes_txt_the_largest_index_counts_the_classes(tmp_path):
    assert load_segmentation(plain(tmp_path)).classes == ("0", "1", "2")
    assert load_segmentation(tmp_path, num_classes=5).num_classes == 5


def test_pascal_voc_reads_palette_indices_and_names_its_classes(tmp_path):
    for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (tmp_path / folder).mkdir(parents=True)
    for i, key in enumerate(("2007_000032", "2007_000039", "2007_000063")):
        _image().save(tmp_path / "JPEGImages" / f"{key}.jpg")
        _palette(_mask(i, classes=21)).save(tmp_path / "SegmentationClass" / f"{key}.png")
    (tmp_path / "ImageSets/Segmentation/train.txt").write_text("2007_000032\n2007_000039\n")
    (tmp_path / "ImageSets/Segmentation/val.txt").write_text("2007_000063\n")
    data = load_segmentation(tmp_path)
    assert data.layout == "voc" and data.classes == VOC_CLASSES
    assert np.array_equal(data.read_mask(data.val[0]).numpy(), _mask(2, classes=21))


def test_ade20k_ignores_0_and_shifts_the_classes_down(tmp_path):
    for stage in ("training", "validation"):
        (tmp_path / "images" / stage).mkdir(parents=True)
        (tmp_path / "annotations" / stage).mkdir(parents=True)
        _image().save(tmp_path / "images" / stage / f"ADE_{stage}_1.jpg")
        values = _mask(0, classes=151)
        values[0, 0], values[0, 1], values[0, 2] = 0, 1, 150
        _grey(values).save(tmp_path / "annotations" / stage / f"ADE_{stage}_1.png")
    data = load_segmentation(tmp_path)
    assert data.layout == "ade20k" and data.num_classes == 150
    mask = data.read_mask(data.train[0]).numpy()
    assert mask[0, 0] == IGNORE_INDEX and mask[0, 1] == 0 and mask[0, 2] == 149
    expected = np.where(values == 0, IGNORE_INDEX, values - 1)
    assert np.array_equal(mask, expected)


def test_a_datasets_folder_with_an_image_and_a_mask_column(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {
        split: {"image": [_image() for _ in range(2)], "mask": [_grey(_mask(i)) for i in range(2)]}
        for split in ("train", "validation")
    }
    features = datasets.Features({"image": datasets.Image(), "mask": datasets.Image()})
    dsd = datasets.DatasetDict({k: datasets.Dataset.from_dict(v, features=features) for k, v in rows.items()})
    dsd.save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "saved" / "classes.txt").write_text("a\nb\nc\n")
    data = load_segmentation(tmp_path / "saved")
    assert data.layout == "datasets" and data.classes == ("a", "b", "c") and len(data.val) == 2
    assert np.array_equal(data.read_mask(data.val[1]).numpy(), _mask(1))
    assert load_segmentation(f"hf:{tmp_path / 'saved'}").layout == "datasets"


def test_a_folder_in_no_layout_is_one_error_listing_them(tmp_path):
    with pytest.raises(MaskDataError, match=r"no segmentation layout.*JPEGImages.*save_to_disk"):
        find_layout(tmp_path)


# ----------------------------------------------------------------------------- bad files
def _error(root: Path) -> str:
    with pytest.raises(MaskDataError) as caught:
        load_segmentation(root)
    return str(caught.value)


def test_a_mask_of_another_size_than_its_image_is_named(tmp_path):
    plain(tmp_path)
    _grey(np.zeros((5, 8))).save(tmp_path / "val/masks/im1.png")
    message = _error(tmp_path)
    assert f"mask {tmp_path / 'val/masks/im1.png'} is 8x5 pixels" in message and "im1.jpg is 8x6" in message


def test_values_above_the_class_count_are_named_with_the_file(tmp_path):
    plain(tmp_path, classes="a\nb\nc\n")
    values = _mask(3)
    values[2, 2] = 7
    _grey(values).save(tmp_path / "train/masks/im0.png")
    message = _error(tmp_path)
    assert f"mask {tmp_path / 'train/masks/im0.png'} holds value(s) 7" in message and "3 classes" in message


def test_an_image_without_its_mask_and_a_mask_without_its_image_are_named(tmp_path):
    plain(tmp_path)
    (tmp_path / "train/masks/im1.png").unlink()
    assert _error(tmp_path).startswith(f"image {tmp_path / 'train/images/im1.jpg'} has no mask")
    (tmp_path / "train/images/im1.jpg").unlink()
    _grey(_mask(0)).save(tmp_path / "val/masks/extra.png")
    assert _error(tmp_path).startswith(f"mask {tmp_path / 'val/masks/extra.png'} has no image")


def test_a_palette_mask_where_grey_indices_are_expected_is_named(tmp_path):
    plain(tmp_path)
    _palette(_mask(1)).save(tmp_path / "val/masks/im1.png")
    assert _error(tmp_path).startswith(f"mask {tmp_path / 'val/masks/im1.png'} is a palette (mode P) PNG")


def test_a_grey_or_colour_mask_where_voc_keeps_palettes_is_named(tmp_path):
    for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (tmp_path / folder).mkdir(parents=True)
    for key in ("a", "b"):
        _image().save(tmp_path / "JPEGImages" / f"{key}.jpg")
    _palette(_mask(0)).save(tmp_path / "SegmentationClass/a.png")
    _grey(_mask(1)).save(tmp_path / "SegmentationClass/b.png")
    (tmp_path / "ImageSets/Segmentation/train.txt").write_text("a\n")
    (tmp_path / "ImageSets/Segmentation/val.txt").write_text("b\n")
    assert _error(tmp_path).startswith(f"mask {tmp_path / 'SegmentationClass/b.png'} is a grey (mode L) PNG")
    Image.fromarray(np.zeros((6, 8, 3), dtype=np.uint8)).save(tmp_path / "SegmentationClass/b.png")
    assert _error(tmp_path).startswith(f"mask {tmp_path / 'SegmentationClass/b.png'} is a colour image (mode RGB)")


def test_a_missing_voc_file_names_the_list_line(tmp_path):
    for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "ImageSets/Segmentation/train.txt").write_text("\nnope\n")
    message = _error(tmp_path)
    assert "train.txt, line 2" in message and str(tmp_path / "JPEGImages/nope.jpg") in message


def test_an_unreadable_mask_and_a_bad_class_list_are_named(tmp_path):
    plain(tmp_path)
    (tmp_path / "val/masks/im0.png").write_bytes(b"not a png")
    assert _error(tmp_path).startswith(f"mask {tmp_path / 'val/masks/im0.png'}: cannot identify image file")
    _grey(_mask(0)).save(tmp_path / "val/masks/im0.png")
    (tmp_path / "classes.txt").write_text("a\n\nb\n")
    assert _error(tmp_path) == f"{tmp_path / 'classes.txt'}, line 2: empty; expected one distinct class name a line"


def test_a_class_list_of_a_million_lines_is_refused_at_once(tmp_path):
    plain(tmp_path)
    (tmp_path / "classes.txt").write_text("".join(f"c{i}\n" for i in range(10**6)))
    started = time.monotonic()
    assert _error(tmp_path) == (
        f"{tmp_path / 'classes.txt'} names 1000000 classes; expected a class count in [1, 254] (255 marks ignored pixels)"
    )
    assert time.monotonic() - started < 10  # the count is checked before the names are compared
    (tmp_path / "classes.txt").write_text("".join(f"c{i}\n" for i in range(200)) + "c7\n")
    assert (
        _error(tmp_path) == f"{tmp_path / 'classes.txt'}, line 201: 'c7' again; expected one distinct class name a line"
    )


def test_num_classes_and_the_masks_keep_the_class_count_below_the_ignore_index(tmp_path):
    plain(tmp_path)
    for count in (10**9, 300, 255, 0):
        with pytest.raises(
            MaskDataError, match=rf"num_classes={count} is invalid; expected a class count in \[1, 254\]"
        ):
            load_segmentation(tmp_path, num_classes=count)
    assert load_segmentation(tmp_path, num_classes=254).num_classes == 254
    _grey(np.full((6, 8), 254)).save(tmp_path / "val/masks/im0.png")  # one class too many
    assert _error(tmp_path) == (
        f"{tmp_path}: the masks hold class 254, so 255 classes; expected a class count in [1, 254] "
        "(255 marks ignored pixels)"
    )
