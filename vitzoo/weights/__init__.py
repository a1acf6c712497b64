"""Pretrained weights: sources, converters between checkpoint layouts, adaptation, saving.

    model = vitzoo.create("vit_b16", pretrained=True)            # the registry's default source
    model = vitzoo.create("vit_b16", weights="hf-hub:org/repo")    # or any file / dir / hub / timm source
    vitzoo.load_weights(model, "checkpoint.safetensors")
    model.save_pretrained("out/"); vitzoo.from_pretrained("out/")
    vitzoo.export(model, "timm", "vit_b16.safetensors")

Modules: files (reading/writing, atomic), convert (key maps per layout), adapt (num_classes,
img_size, in_chans), hub (huggingface_hub downloads), sources (what a source string means),
load / save (the public functions), errors.
"""

from .errors import (
    UnknownFormatError,
    WeightsDownloadError,
    WeightsError,
    WeightsFileError,
    WeightsMismatchError,
    WeightsNotCachedError,
    WeightsNotFoundError,
)
from .load import create_pretrained, from_pretrained, load_weights
from .pretrained_cfg import PretrainedCfg
from .save import convert, download, export, save_pretrained

__all__ = [
    "PretrainedCfg",
    "UnknownFormatError",
    "WeightsDownloadError",
    "WeightsError",
    "WeightsFileError",
    "WeightsMismatchError",
    "WeightsNotCachedError",
    "WeightsNotFoundError",
    "convert",
    "create_pretrained",
    "download",
    "export",
    "from_pretrained",
    "load_weights",
    "save_pretrained",
]
