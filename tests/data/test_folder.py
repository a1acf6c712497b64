"""vitzoo/data/folder.py: ImageFolder trees decoded once (or listed for streaming), splits, corrupt images,
bad layouts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from vitzoo.data import CorruptImageError, FolderDataError, ImageFiles, load_data, load_image_folder, store_size_for
from vitzoo.data.folder import UnreadableImageError, decode_image


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


def test_symlinks_are_not_followed_out_of_the_class_folder_or_in_loops(tmp_path: Path) -> None:
    _tree(tmp_path, per_class=4)
    cat = tmp_path / "cat"
    (cat / "loop").symlink_to("..")  # would bring every dog image in as a "cat", endlessly nested
    (cat / "dogs").symlink_to(tmp_path / "dog")
    (cat / "stolen.png").symlink_to(tmp_path / "dog" / "0.png")
    (cat / "dangling.png").symlink_to(tmp_path / "nowhere.png")
    (cat / "sub").mkdir()
    (cat / "sub" / "alias.png").symlink_to(cat / "0.png")  # a file inside the class folder: kept
    with pytest.warns(
        UserWarning, match=r"skipped 4 symbolic link\(s\).*: cat/dangling\.png, cat/dogs, cat/loop, cat/stolen\.png$"
    ):
        splits = load_image_folder(tmp_path, store_size=8, val_split=0.25)
    counts = [a + b for a, b in zip(splits.train.class_counts(), splits.val.class_counts())]
    assert counts == [5, 4]
    # every "cat" is a cat: none of the red dog images came in under the wrong label
    for part in (splits.train, splits.val):
        assert part.images[part.labels == 0, 0].float().max() < 10


def test_a_class_whose_images_are_all_unreadable_is_an_error(tmp_path: Path) -> None:
    _tree(tmp_path / "train", per_class=3)
    _tree(tmp_path / "val", per_class=2)
    for path in (tmp_path / "train" / "cat").iterdir():
        path.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    with (
        pytest.warns(UserWarning, match="unreadable image"),
        pytest.raises(FolderDataError, match=r"train: class folder\(s\) 'cat' hold no readable images"),
    ):
        load_data("folder", path=tmp_path, store_size=8)


def _png16_rgb(path: Path, rgb: tuple[int, int, int], size: int = 4) -> None:
    """A 48-bit RGB PNG, written by hand: PIL cannot write one."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + struct.pack(">3H", *rgb) * size
    header = struct.pack(">IIBBBBB", size, size, 16, 2, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * size)) + chunk(b"IEND", b"")
    )


def test_16_bit_images_are_scaled_to_8_bits_not_clipped(tmp_path: Path) -> None:
    gray = tmp_path / "gray"
    gray.mkdir()
    Image.new("I;16", (6, 4), 32768).save(gray / "half.png")  # 16-bit grayscale PNG
    Image.new("I;16", (6, 4), 65535).save(gray / "full.png")
    Image.new("I", (6, 4), 32768).save(gray / "int32.tif")  # mode "I", as older Pillow opens 16-bit PNGs
    _png16_rgb(tmp_path / "rgb" / "a.png", (32768, 65535, 0))
    _png16_rgb(tmp_path / "rgb" / "b.png", (32768, 65535, 0))
    splits = load_image_folder(tmp_path, store_size=4, val_split=0.5)
    images = torch.cat([splits.train.images, splits.val.images])
    labels = torch.cat([splits.train.labels, splits.val.labels])
    names = sorted((gray).iterdir())
    assert [p.name for p in names] == ["full.png", "half.png", "int32.tif"]
    gray_values = sorted(images[labels == 0].flatten().unique().tolist())
    assert gray_values == [128, 255]  # 32768 -> 128 (was 255: saturated), 65535 -> 255
    rgb = images[labels == 1]
    assert rgb[:, 0].unique().tolist() == [128] and rgb[:, 1].unique().tolist() == [255]
    assert rgb[:, 2].unique().tolist() == [0]


def test_float_tiff_intensities_0_to_1_are_scaled_to_0_to_255(tmp_path: Path) -> None:
    import numpy as np
    from torchvision.transforms.v2 import functional as TF

    from vitzoo.data.transforms import ReadAs8Bit

    values = np.linspace(0, 1, 16 * 8, dtype=np.float32).reshape(8, 16)
    Image.fromarray(values, "F").save(tmp_path / "float.tif")  # a 32-bit float TIFF
    with Image.open(tmp_path / "float.tif") as img:
        assert img.mode == "F"
    expected = torch.from_numpy(np.rint(values * 255).astype(np.uint8))
    rgb = decode_image(tmp_path / "float.tif", TF.pil_to_tensor)  # the data pipeline (RGB)
    assert rgb.shape == (3, 8, 16) and all(torch.equal(rgb[c], expected) for c in range(3))
    as_is = decode_image(tmp_path / "float.tif", lambda img: TF.pil_to_tensor(ReadAs8Bit(1)(img)), rgb=False)
    assert torch.equal(as_is[0], expected)  # vitzoo predict's path (the image in its own mode)


@pytest.mark.parametrize(
    ("values", "found"),
    [(255.0, "values from 0 to 255"), (float("nan"), "values that are not finite"), (-0.5, "values from -0.5 to")],
)
def test_float_images_outside_0_to_1_are_refused_by_mode(tmp_path: Path, values: float, found: str) -> None:
    import numpy as np

    pixels = np.zeros((4, 4), dtype=np.float32)
    pixels[0, 0] = values
    Image.fromarray(pixels, "F").save(tmp_path / "float.tif")
    with pytest.raises(UnreadableImageError, match=rf"32-bit float image \(mode F\) with {found}.*expected .* 0\.\.1"):
        decode_image(tmp_path / "float.tif", lambda img: img)


def test_16_bit_tiff_is_scaled_like_a_16_bit_png(tmp_path: Path) -> None:
    Image.new("I;16", (6, 4), 32768).save(tmp_path / "half.tif")
    with Image.open(tmp_path / "half.tif") as img:
        assert img.mode == "I;16"
    assert decode_image(tmp_path / "half.tif", lambda img: (img.mode, img.getpixel((0, 0)))) == ("RGB", (128,) * 3)


def test_a_fifo_named_like_an_image_is_refused_without_opening_it(tmp_path: Path) -> None:
    import os
    import threading

    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    os.mkfifo(tmp_path / "x.png")  # opening it would block until a writer comes: forever
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            decode_image(str(tmp_path / "x.png"), lambda img: img)
        except BaseException as err:
            outcome.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert outcome, "decode_image opened the FIFO and hangs"
    assert isinstance(outcome[0], UnreadableImageError)
    assert str(outcome[0]) == "not a regular file (a FIFO); refused without opening it"
    with pytest.raises(UnreadableImageError, match=r"not a regular file \(a folder\)"):
        decode_image(tmp_path, lambda img: img)


def _small_tree(root: Path) -> None:
    for c, name in enumerate(("cat", "dog")):
        for i in range(3):
            _image(root / name / f"{i}.png", (200 * c, 50, 100), size=(10, 10))


def test_skip_warning_always_gives_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import ImageFile

    _small_tree(tmp_path)
    _image(tmp_path / "cat" / "huge.png", (0, 0, 0), size=(30, 20))
    _image(tmp_path / "dog" / "silent.png", (0, 0, 0), size=(10, 10))
    load = ImageFile.ImageFile.load

    def failing_load(self):  # what a real huge image does under memory pressure, without the memory
        if self.filename.endswith("huge.png"):
            raise MemoryError()
        if self.filename.endswith("silent.png"):
            raise OSError()
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", failing_load)
    with (
        pytest.warns(UserWarning, match=r"huge\.png: out of memory decoding 30x20 image"),
        pytest.warns(UserWarning, match=r"silent\.png: OSError \(no message\)"),
        pytest.warns(UserWarning, match=r"skipped 2 unreadable image\(s\) of 8"),
    ):
        splits = load_image_folder(tmp_path, store_size=8, val_split=0.3)
    assert len(splits.train) + len(splits.val) == 6


def test_decompression_bombs_are_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image as PILImage

    _small_tree(tmp_path)
    _image(tmp_path / "cat" / "bomb.png", (0, 0, 0), size=(40, 30))  # over the limit: PIL only warns
    _image(tmp_path / "dog" / "bigger.png", (0, 0, 0), size=(50, 50))  # over twice the limit: PIL raises
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 1000)  # stands in for the default of ~89 million
    with (
        pytest.warns(PILImage.DecompressionBombWarning),
        pytest.warns(UserWarning, match=r"bomb\.png: image is 40x30 = 1200 pixels, more than PIL's decompression"),
        pytest.warns(UserWarning, match=r"bigger\.png: .*decompression bomb"),
        pytest.warns(UserWarning, match=r"skipped 2 unreadable image\(s\) of 8"),
    ):
        splits = load_image_folder(tmp_path, store_size=8, val_split=0.3)
    assert len(splits.train) + len(splits.val) == 6
    with (
        pytest.warns(PILImage.DecompressionBombWarning),
        pytest.raises(CorruptImageError, match=r"bomb\.png.*decompression-bomb limit"),
    ):
        load_image_folder(tmp_path, store_size=8, val_split=0.3, strict=True)


def test_a_folder_over_the_memory_budget_is_streamed_from_disk(tmp_path: Path) -> None:
    _tree(tmp_path / "train", per_class=4)
    _tree(tmp_path / "val", per_class=2)
    small = load_image_folder(tmp_path, store_size=16)  # 12 images of 3 x 16 x 16 bytes: well within 4 GiB
    assert not small.streamed and small.note is None
    large = load_image_folder(tmp_path, store_size=16, memory_budget=4096)
    assert large.streamed and isinstance(large.train, ImageFiles) and isinstance(large.val, ImageFiles)
    assert "12 images decoded would take 0.0 GiB, more than the in-memory budget" in (large.note or "")
    assert large.train.class_counts() == small.train.class_counts() and large.val.class_counts() == [2, 2]
    assert large.classes == small.classes and large.train.source == f"{tmp_path}/train"
    forced = load_image_folder(tmp_path, store_size=16, stream=True)
    assert forced.streamed and forced.note is None  # asked for, so nothing to explain
    with pytest.raises(FolderDataError, match=r"more than the in-memory budget of 0\.0 GiB; stream the images"):
        load_image_folder(tmp_path, store_size=16, memory_budget=4096, stream=False)
    with pytest.raises(ValueError, match="stream=True applies to image folders"):
        load_data("mnist-sample", stream=True)
