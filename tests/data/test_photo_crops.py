"""vitzoo/data/photo_crops.py: an ImageFolder tree of crops of scikit-image's photos at many
aspect ratios, one class per photo, deterministic from the seed, refusing a folder in use."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from vitzoo.data import load_data
from vitzoo.data.photo_crops import PHOTOS, build_photo_crops
from vitzoo.data.synthetic_seg import SceneBuildError

pytest.importorskip("skimage", reason="the photos are scikit-image's")


def test_crops_are_a_folder_of_mixed_aspect_ratios(tmp_path: Path) -> None:
    root = build_photo_crops(tmp_path / "crops", train=6, val=2, sides=(24, 40), seed=1)
    splits = load_data("folder", path=str(root), stream=True)
    assert splits.classes == tuple(sorted(PHOTOS)) and len(splits.train) == 24 and len(splits.val) == 8
    sizes = [Image.open(p).size for p in sorted(root.glob("train/*/*.png"))]
    assert all(24 <= max(w, h) <= 40 for w, h in sizes)
    aspects = [w / h for w, h in sizes]
    assert min(aspects) < 0.8 and max(aspects) > 1.25  # tall and wide ones
    again = build_photo_crops(tmp_path / "again", train=6, val=2, sides=(24, 40), seed=1)
    for path in sorted(root.glob("*/*/*.png")):
        assert (again / path.relative_to(root)).read_bytes() == path.read_bytes()


def test_a_folder_in_use_and_bad_counts_are_refused(tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x.txt").write_text("mine")
    with pytest.raises(SceneBuildError, match="is not an empty folder"):
        build_photo_crops(tmp_path / "used", train=1, val=1)
    assert (tmp_path / "used" / "x.txt").read_text() == "mine"
    with pytest.raises(SceneBuildError, match="train=0 is invalid"):
        build_photo_crops(tmp_path / "new", train=0)
    assert not (tmp_path / "new").exists()
