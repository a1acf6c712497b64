"""The features file: written atomically, read back exactly, and bad files named with their field."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from vitzoo.probe import Features, FeaturesFileError, load_features, save_features
from vitzoo.probe.featurefile import FORMAT, METADATA_KEY


def sample(names=None) -> Features:
    return Features(
        features=torch.randn(4, 3),
        labels=torch.tensor([0, 1, 1, 0]),
        split=torch.tensor([0, 0, 1, 1], dtype=torch.uint8),
        index=torch.tensor([0, 1, 0, 1]),
        classes=("cat", "dog"),
        settings={"splits": ["train", "val"], "model": "m"},
        names=names,
    )


def test_round_trip_with_names_and_splits(tmp_path):
    names = ["a/1.png", "b/ü 2.jpg", "", "c/3.png"]
    path = save_features(tmp_path / "f.safetensors", sample(names))
    back = load_features(path)
    original = sample(names)
    assert torch.equal(back.labels, original.labels) and back.names == names and back.classes == ("cat", "dog")
    assert back.settings["model"] == "m" and back.settings["count"] == 4 and back.settings["format"] == FORMAT
    val = back.split_of("val")
    assert val.names == ["", "c/3.png"] and val.labels.tolist() == [1, 0] and val.present_splits() == ["val"]
    assert load_features(save_features(tmp_path / "g.safetensors", sample())).names is None
    with pytest.raises(FeaturesFileError, match="no split 'test'"):
        back.split_of("test")


def _write(path, tensors, settings):
    save_file(tensors, str(path), metadata={METADATA_KEY: json.dumps(settings)} if settings is not None else None)
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t, s: s.update(format="other/1"), "metadata format 'other/1'"),
        (lambda t, s: s.update(classes="cat"), "field 'classes' must be a list of strings"),
        (
            lambda t, s: t.update(labels=torch.tensor([0, 1, 2, 0])),
            r"tensor 'labels' holds 2 at row 2; expected a class index in \[0, 2\)",
        ),
        (
            lambda t, s: t.update(split=torch.tensor([0, 0, 2, 1], dtype=torch.uint8)),
            r"tensor 'split' holds 2 at row 2; expected an index in \[0, 2\) of the metadata's splits",
        ),
        (lambda t, s: t.update(index=torch.arange(3)), "tensor 'index' has 3 rows, 'features' 4"),
        (lambda t, s: t.pop("features"), "tensor 'features' is missing"),
        (lambda t, s: t.update(features=torch.full((4, 3), float("nan"))), "finite floating point"),
        (lambda t, s: t.update(features=torch.zeros(4, 0)), "tensor 'features' has no columns"),
        (
            lambda t, s: t.update(features=torch.zeros(4, 3, dtype=torch.int64)),
            "'features' is int64; expected floating",
        ),
        (
            lambda t, s: t.update(labels=torch.tensor([0.0, 0.99999994, 1.0, 0.0])),
            "'labels' is float32; expected integer",
        ),
        (lambda t, s: t.update(labels=torch.tensor([0, 1, -1, 0])), r"'labels' holds -1 at row 2; expected a class"),
        (lambda t, s: t.update(split=torch.tensor([0, -1, 1, 1])), r"'split' holds -1 at row 1; expected an index"),
        (lambda t, s: t.update(split=torch.tensor([0.0, 0, 1, 1])), "'split' is float32; expected integer"),
        (lambda t, s: t.update(index=torch.tensor([0, 1, -5, 1])), r"'index' holds -5 at row 2; expected a position"),
        (
            lambda t, s: t.update(names=torch.zeros(2, dtype=torch.uint8), name_offsets=torch.tensor([0, 2, 1, 1, 2])),
            "'name_offsets' decreases",
        ),
        (
            lambda t, s: t.update(
                names=torch.zeros(2, dtype=torch.float32), name_offsets=torch.tensor([0, 0, 1, 1, 2])
            ),
            "'names' is float32; expected integer",
        ),
    ],
)
def test_bad_files_name_the_field(tmp_path, change, message):
    tensors = {
        "features": torch.randn(4, 3),
        "labels": torch.tensor([0, 1, 1, 0]),
        "split": torch.tensor([0, 0, 1, 1], dtype=torch.uint8),
        "index": torch.arange(4),
    }
    settings = {"format": FORMAT, "classes": ["cat", "dog"], "splits": ["train", "val"]}
    change(tensors, settings)
    path = _write(tmp_path / "bad.safetensors", tensors, settings)
    with pytest.raises(FeaturesFileError, match=message) as info:
        load_features(path)
    assert str(path) in str(info.value)


def test_files_that_are_not_features(tmp_path):
    with pytest.raises(FeaturesFileError, match="no such features file"):
        load_features(tmp_path / "missing.safetensors")
    (tmp_path / "text.safetensors").write_text("hello")
    with pytest.raises(FeaturesFileError, match="not a readable safetensors file"):
        load_features(tmp_path / "text.safetensors")
    path = _write(tmp_path / "weights.safetensors", {"w": torch.zeros(2)}, None)
    with pytest.raises(FeaturesFileError, match="not a file written by `vitzoo features`"):
        load_features(path)
