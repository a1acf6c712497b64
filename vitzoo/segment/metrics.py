"""Segmentation metrics from a confusion matrix of pixels, summed over the whole evaluation set.

IoU of class c = TP / (TP + FP + FN); mIoU the mean over the classes present in the ground truth
or the predictions (a class absent from both is skipped, not counted as 0 or 1); pixel accuracy
the share of labelled pixels predicted right. Pixels labelled IGNORE_INDEX count nowhere. These
are torchmetrics' `MulticlassJaccardIndex(num_classes, ignore_index=255, average="macro")` and
`MulticlassAccuracy(num_classes, ignore_index=255, average="micro")` over the same pixels
(tests/segment/test_metrics.py checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..data.masks import IGNORE_INDEX


def confusion_matrix(
    pred: torch.Tensor, target: torch.Tensor, num_classes: int, ignore_index: int = IGNORE_INDEX
) -> torch.Tensor:
    """(num_classes, num_classes) int64 pixel counts, rows the ground truth, columns the prediction."""
    valid = target != ignore_index
    pairs = target[valid].long() * num_classes + pred[valid].long()
    return torch.bincount(pairs, minlength=num_classes**2).view(num_classes, num_classes)


def miou(confusion: torch.Tensor, classes: Sequence[str]) -> dict[str, Any]:
    """{"miou", "pixel_accuracy", "per_class_iou": {name: IoU, or None for a class absent from both}}."""
    counts = confusion.double()
    hits = counts.diagonal()
    union = counts.sum(0) + counts.sum(1) - hits
    present = union > 0
    iou = torch.where(present, hits / union.clamp(min=1), torch.zeros_like(hits))
    total = counts.sum()
    return {
        "miou": float(iou[present].mean()) if present.any() else None,
        "pixel_accuracy": float(hits.sum() / total) if total > 0 else None,
        "per_class_iou": {name: float(v) if p else None for name, v, p in zip(classes, iou, present)},
    }
