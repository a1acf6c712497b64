"""vitzoo's own saved-model layout, written by `save_pretrained` and read back by vitzoo.weights:

    <directory>/config.json        {"format": "vitzoo", "format_version": 1, "architecture": <name or null>,
                                    "config": <ViTConfig fields>, "pretrained_cfg": <preprocessing, labels>}
    <directory>/model.safetensors  the state dict in vitzoo's (= timm's) names

Each file is written atomically, weights first: a config.json is only there once its weights are.
Like the model it saves, this module sits in vitzoo's bottom layer (it imports only `atomic`).
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from .atomic import write_json, write_safetensors

FORMAT = "vitzoo"  # the "format" value in our config.json
FORMAT_VERSION = 1
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"


def save_pretrained(model: nn.Module, directory: str | os.PathLike[str]) -> Path:
    """Write `model` as config.json + model.safetensors into `directory` (created if needed)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise TypeError(
            f"save_pretrained needs a vitzoo VisionTransformer (with a .config), got {type(model).__name__}"
        )
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"save_pretrained: {str(directory)!r} exists and is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors(directory / WEIGHTS_NAME, model.state_dict(), metadata={"format": "pt"})
    pcfg = getattr(model, "pretrained_cfg", None)
    write_json(
        directory / CONFIG_NAME,
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "architecture": getattr(model, "architecture", None),
            "config": config.to_dict(),
            "pretrained_cfg": pcfg.to_dict() if pcfg is not None else {},
        },
    )
    return directory
