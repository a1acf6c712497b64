"""Exporting the best model of a run as a pretrained directory that `vitzoo.create(name,
weights=DIR)` (and `vitzoo eval`, `vitzoo predict`) load: config.json + model.safetensors in
vitzoo's save_pretrained layout, with the dataset's class names as label names, plus
train_result.json (accuracy, epoch, data) next to them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from ..atomic import write_json
from ..layout import save_pretrained
from ..pretrained_cfg import attach_pretrained_cfg, pretrained_cfg_of

BEST_DIR = "best"  # a run directory's best model: out_dir / BEST_DIR
RESULT_NAME = "train_result.json"


def export_pretrained(
    model: nn.Module, directory: str | os.PathLike[str], *, classes: tuple[str, ...], extra: dict[str, Any]
) -> Path:
    directory = Path(directory)
    pcfg = pretrained_cfg_of(model)
    if pcfg is not None:  # the labels travel with the weights (predict prints them)
        attach_pretrained_cfg(model, pcfg.replace(num_classes=len(classes), label_names=tuple(classes)))
    save_pretrained(model, directory)
    write_json(directory / RESULT_NAME, extra)
    return directory
