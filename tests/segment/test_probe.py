"""vitzoo/segment/probe.py end to end on the built digits-on-photos dataset: the run folder, the
predictions (their metrics equal torchmetrics' over the written PNGs), the cached features reused,
augmented training, and the settings refused with the setting named."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo.data.masks import load_segmentation
from vitzoo.segment import SegmentSettings, SegmentSettingsError, segment_probe
from vitzoo.segment import cache as cache_module

FAST = {"crop": 32, "steps": 8, "batch_size": 4}


@pytest.fixture
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return vitzoo.create("vit_mnist_tiny")  # patch 16: a 48x64 scene is 3x4 tokens


def test_the_probe_writes_its_run_and_its_metrics_are_torchmetrics_over_the_predictions(digit_scenes, model, tmp_path):
    metrics = pytest.importorskip("torchmetrics.classification")
    data = load_segmentation(digit_scenes)
    report = segment_probe(model, data, tmp_path / "run", SegmentSettings(**FAST), predictions_dir=tmp_path / "pred")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "examples.png", "head.safetensors", "segment.json", "train_features.safetensors"
    ]  # fmt: skip
    assert json.loads((tmp_path / "run" / "segment.json").read_text())["miou"] == report["miou"]
    assert sorted(p.stem for p in (tmp_path / "pred").iterdir()) == sorted(s.name for s in data.val)
    jaccard = metrics.MulticlassJaccardIndex(num_classes=11, ignore_index=255, average="macro")
    accuracy = metrics.MulticlassAccuracy(num_classes=11, ignore_index=255, average="micro")
    for sample in data.val:
        pred = torch.from_numpy(np.array(Image.open(tmp_path / "pred" / f"{sample.name}.png"))).long()
        truth = data.read_mask(sample).long()
        jaccard.update(pred[None], truth[None])
        accuracy.update(pred[None], truth[None])
    assert report["miou"] == pytest.approx(float(jaccard.compute()), abs=1e-6)
    assert report["pixel_accuracy"] == pytest.approx(float(accuracy.compute()), abs=1e-6)
    assert set(report["per_class_iou"]) == set(data.classes)
    assert report["train_windows"] == 8 * 2 * 3  # 48x64 scenes, 32-px windows 16 px apart (2/3 of 32, to patches)
    with Image.open(tmp_path / "run" / "examples.png") as picture:
        assert picture.size == (3 * 64 + 2 * 4, 4 * 48 + 3 * 4)  # image | truth | prediction, 4 rows


def test_a_second_run_in_the_folder_reads_the_cached_features(digit_scenes, model, tmp_path, monkeypatch):
    data = load_segmentation(digit_scenes)
    first = segment_probe(model, data, tmp_path, SegmentSettings(**FAST), progress=False, threads=1)

    def refuse(*args, **kwargs):
        raise AssertionError("the backbone ran again")

    monkeypatch.setattr(cache_module, "extract_crops", refuse)
    again = segment_probe(model, data, tmp_path, SegmentSettings(**FAST), progress=False, threads=1)
    assert again["miou"] == first["miou"] and again["per_class_iou"] == first["per_class_iou"]
    with pytest.raises(AssertionError, match="ran again"):  # other windows: other features
        segment_probe(model, data, tmp_path, SegmentSettings(**{**FAST, "stride": 32}), progress=False)


def test_augmented_training_runs_the_backbone_on_random_crops(digit_scenes, model, tmp_path):
    data = load_segmentation(digit_scenes)
    settings = SegmentSettings(**FAST, augment=True, eval_mode="whole")
    report = segment_probe(model, data, tmp_path, settings, progress=False)
    assert report["train_windows"] is None and not (tmp_path / "train_features.safetensors").exists()
    assert 0 <= report["miou"] <= 1 and report["settings"]["augment"] is True


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"crop": 24}, "crop=24 is invalid; expected a positive multiple of the patch"),
        ({"crop": 32, "stride": 48}, "stride=48 is larger than crop=32"),
        ({"eval_mode": "tiles"}, "eval_mode='tiles' is invalid"),
    ],
)
def test_unusable_settings_are_refused_naming_them(digit_scenes, model, tmp_path, settings, message):
    with pytest.raises(SegmentSettingsError, match=message):
        segment_probe(model, load_segmentation(digit_scenes), tmp_path, SegmentSettings(**settings))


def test_a_folder_holding_other_files_is_refused_untouched(digit_scenes, model, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SegmentSettingsError, match="holds files that are not a probe run's"):
        segment_probe(model, load_segmentation(digit_scenes), tmp_path, SegmentSettings(**FAST))
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_predictions_are_refused_in_or_around_the_data_s_image_and_mask_folders(digit_scenes, model, tmp_path):
    data = load_segmentation(digit_scenes)
    masks = digit_scenes / "val" / "masks"
    before = {p.name: p.read_bytes() for p in masks.iterdir()}
    for folder, source in (
        (masks, masks),  # NAME.png is the mask's own name
        (masks / "new", masks),
        (digit_scenes / "train", digit_scenes / "train" / "images"),
    ):
        with pytest.raises(SegmentSettingsError, match=rf"--predictions {folder} and the data's folder {source} are"):
            segment_probe(model, data, tmp_path / "run", SegmentSettings(**FAST), predictions_dir=folder)
    assert {p.name: p.read_bytes() for p in masks.iterdir()} == before and not (tmp_path / "run").exists()
