"""Semantic segmentation with a frozen backbone (`vitzoo segment`; docs/segmentation.md).

    from vitzoo.data.masks import load_segmentation
    from vitzoo.segment import SegmentSettings, segment_probe
    report = segment_probe(model, load_segmentation("scenes/"), "runs/seg", SegmentSettings(crop=32))

Modules: the head (`head`), what the backbone sees (`crops`, `backbone`), the cached training
features (`cache`), training (`fit`), sliding-window evaluation (`infer`), the metrics (`metrics`),
the PNG files (`figure`) and the whole probe (`probe`).
"""

from __future__ import annotations

from .head import LinearHead
from .infer import EVAL_MODES
from .metrics import confusion_matrix, miou
from .probe import SegmentSettings, SegmentSettingsError, segment_probe

__all__ = [
    "EVAL_MODES",
    "LinearHead",
    "SegmentSettings",
    "SegmentSettingsError",
    "confusion_matrix",
    "miou",
    "segment_probe",
]
