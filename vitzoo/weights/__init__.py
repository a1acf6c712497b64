"""Pretrained weights: reading every supported layout, converting its keys, adapting it to the
model, writing it for timm. Nothing here knows the registry: a caller that has names to explain
(vitzoo/builder.py) hands in a `resolve` function.

    model = vitzoo.create("vit_b16", pretrained=True)            # the registry's default source
    model = vitzoo.create("vit_b16", weights="hf-hub:org/repo")    # or any file / dir / hub / timm source
    vitzoo.load_weights(model, "checkpoint.safetensors")
    model.save_pretrained("out/"); vitzoo.from_pretrained("out/")
    vitzoo.export(model, "timm", "vit_b16.safetensors")

Modules: files (reading checkpoints safely), keymaps (one key map per layout: where pretrained
weights are converted), transformers_files (what a transformers config.json and
preprocessor_config.json state), adapt (num_classes, img_size, in_chans), hub (huggingface_hub
downloads), sources (what a source string means), load (into models), exporter (for timm), errors.
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
from .exporter import export
from .load import build_pretrained, from_pretrained, load_weights
from .sources import Architecture, Resolve, load_source

__all__ = [
    "Architecture",
    "Resolve",
    "UnknownFormatError",
    "WeightsDownloadError",
    "WeightsError",
    "WeightsFileError",
    "WeightsMismatchError",
    "WeightsNotCachedError",
    "WeightsNotFoundError",
    "build_pretrained",
    "export",
    "from_pretrained",
    "load_source",
    "load_weights",
]
