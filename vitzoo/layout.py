"""vitzoo's own saved-model layout, written by `save_pretrained` and read back by vitzoo.weights:

    <directory>/config.json        {"format": "vitzoo", "format_version": 1, "architecture": <name or null>,
                                    "config": <ViTConfig fields>, "pretrained_cfg": <preprocessing, labels>}
    <directory>/model.safetensors  the state dict in vitzoo's (= timm's) names; above `max_shard_size`
                                   its shards and model.safetensors.index.json (vitzoo/weight_shards.py)

A save is one whole or none: config.json and the weights are each written as a temporary first
(weight_shards.write_weights), then renamed into place, the weights first and config.json last,
so an error or a kill while writing leaves the earlier save as it was. The save's random id
(`save_id` in config.json, weight_shards.SAVE_ID_KEY in the weights' metadata) lets a reader tell
which weights a config.json was saved with: a kill in the moment between the renames, or files
copied in from another save, is then named instead of loading one save's config with another's
weights (vitzoo/weights/sources.py).

Like the model it saves, this module sits just above vitzoo's bottom layer (it imports only
`atomic`, `weight_shards`, `pretrained_cfg` and `layers.lora`, which merges LoRA adapters into the
weights saved).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from torch import nn

from .atomic import json_text
from .layers.lora import merged_state_dict
from .pretrained_cfg import pretrained_cfg_of
from .weight_shards import DEFAULT_MAX_SHARD_SIZE, parse_shard_size, write_weights

FORMAT = "vitzoo"  # the "format" value in our config.json
FORMAT_VERSION = 1
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
SAVE_ID = "save_id"  # config.json's key of the save's id, which its weights' files state too
_ARCHITECTURE = "architecture"  # the model attribute naming its registered architecture


def save_pretrained(
    model: nn.Module, directory: str | os.PathLike[str], *, max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE
) -> Path:
    """Write `model` as config.json + model.safetensors into `directory` (created if needed); weights
    larger than `max_shard_size` (bytes, or "5GB", "500MB") are written as shards and their index,
    as transformers writes them. LoRA adapters (layers/lora.py) are merged into their weights: the
    saved model is a plain one."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise TypeError(
            f"save_pretrained needs a vitzoo VisionTransformer (with a .config), got {type(model).__name__}"
        )
    parse_shard_size(max_shard_size)  # refused before anything is written
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"save_pretrained: {str(directory)!r} exists and is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    save_id = secrets.token_hex(16)
    pcfg = pretrained_cfg_of(model)
    saved = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "architecture": getattr(model, _ARCHITECTURE, None),
        "config": config.to_dict(),
        "pretrained_cfg": pcfg.to_dict() if pcfg is not None else {},
        SAVE_ID: save_id,
    }
    write_weights(
        directory,
        merged_state_dict(model),
        name=WEIGHTS_NAME,
        max_shard_size=max_shard_size,
        metadata={"format": "pt"},
        save_id=save_id,
        then={CONFIG_NAME: json_text(saved)},  # renamed into place last, after the weights
    )
    return directory


def attach_architecture(model: object, name: str) -> None:
    """Record on `model` the registered name it was built as (`model.architecture`), which
    save_pretrained writes into config.json. A plain attribute, set this way because builders may
    return any nn.Module, whose typed `__setattr__` only takes tensors and modules."""
    setattr(model, _ARCHITECTURE, name)
