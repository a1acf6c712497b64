"""vitzoo/segment/metrics.py equals torchmetrics' multiclass Jaccard index (macro: classes absent
from both the ground truth and the prediction skipped; ignore index 255) and micro accuracy, over
pixels summed across images, as the probe sums them."""

from __future__ import annotations

import pytest
import torch

torchmetrics = pytest.importorskip("torchmetrics", reason="torchmetrics (a test dependency) is the reference")
from torchmetrics.classification import MulticlassAccuracy, MulticlassJaccardIndex  # noqa: E402

from vitzoo.segment.metrics import confusion_matrix, miou  # noqa: E402

CLASSES = 6


def _reference(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, list[float], float]:
    jaccard = MulticlassJaccardIndex(num_classes=CLASSES, ignore_index=255, average="macro")
    per_class = MulticlassJaccardIndex(num_classes=CLASSES, ignore_index=255, average="none")
    accuracy = MulticlassAccuracy(num_classes=CLASSES, ignore_index=255, average="micro")
    for pred, target in pairs:
        for metric in (jaccard, per_class, accuracy):
            metric.update(pred.long()[None], target.long()[None])
    return float(jaccard.compute()), per_class.compute().tolist(), float(accuracy.compute())


def _ours(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    total = sum(confusion_matrix(pred, target, CLASSES) for pred, target in pairs)
    return miou(total, [str(c) for c in range(CLASSES)])


def test_miou_and_pixel_accuracy_equal_torchmetrics_with_ignored_pixels_and_absent_classes():
    generator = torch.Generator().manual_seed(0)
    pairs = []
    for size in ((7, 9), (12, 5), (8, 8)):
        target = torch.randint(0, 4, size, generator=generator)  # classes 4 and 5 never in the ground truth
        target[torch.rand(size, generator=generator) < 0.2] = 255
        pred = torch.randint(0, 5, size, generator=generator)  # class 4 predicted, class 5 absent from both
        pairs.append((pred.to(torch.uint8), target.to(torch.uint8)))
    mean, per_class, accuracy = _reference(pairs)
    ours = _ours(pairs)
    assert ours["miou"] == pytest.approx(mean, abs=1e-6)
    assert ours["pixel_accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert ours["per_class_iou"]["5"] is None  # absent from both: skipped, not 0
    assert ours["per_class_iou"]["4"] == 0.0  # predicted but never true: counted, 0
    for c in range(5):
        assert ours["per_class_iou"][str(c)] == pytest.approx(per_class[c], abs=1e-6)


def test_a_perfect_prediction_scores_one_and_ignored_pixels_count_nowhere():
    target = torch.tensor([[0, 1, 255], [2, 2, 255]], dtype=torch.uint8)
    pred = torch.tensor([[0, 1, 3], [2, 2, 0]], dtype=torch.uint8)
    scores = miou(confusion_matrix(pred, target, 4), ["a", "b", "c", "d"])
    assert scores == {"miou": 1.0, "pixel_accuracy": 1.0, "per_class_iou": {"a": 1.0, "b": 1.0, "c": 1.0, "d": None}}
