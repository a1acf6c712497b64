"""Pretrained weights: reading every supported layout, converting its keys, adapting it to the
model, writing it for timm. Nothing here knows the registry; the flow runs one way:

    ckpt = read_source(source)            # sources.py: tensors in vitzoo's names + what the source states
    ckpt.apply_architecture(arch)         # the caller (vitzoo/builder.py) explains `ckpt.names`
    model = <built by the caller>         #   (build_args, vit_config: what the checkpoint decides)
    load_checkpoint(model, ckpt)          # load.py: verify, adapt, load
    model.pretrained_cfg = pretrained_cfg_for(ckpt, model, base)

Users call vitzoo.create(..., pretrained=...), vitzoo.from_pretrained, vitzoo.load_weights and
vitzoo.export.

Modules: checkpoint (the read source, as data), sources (what a source string means; reading it),
files (reading checkpoint files safely), keymaps (one key map per layout: where pretrained weights
are converted), shapes (the config a state dict's shapes determine), transformers_files and
timm_files (what those libraries' config files state; "timm:<name>" through timm), norm_eps (each
family's norm eps, one table), verify (a config checked against its tensors, a checkpoint against
its model), adapt (num_classes, img_size, in_chans), load (into models), hub (huggingface_hub
downloads; hub_verify: downloaded files checked; hub_logs: its log lines kept quiet), exporter (for
timm), errors.
"""

from .checkpoint import Architecture, Checkpoint
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
from .load import build_args, load_checkpoint, pretrained_cfg_for, vit_config
from .sources import read_source
from .verify import check_named_args

__all__ = [
    "Architecture",
    "Checkpoint",
    "UnknownFormatError",
    "WeightsDownloadError",
    "WeightsError",
    "WeightsFileError",
    "WeightsMismatchError",
    "WeightsNotCachedError",
    "WeightsNotFoundError",
    "build_args",
    "check_named_args",
    "export",
    "load_checkpoint",
    "pretrained_cfg_for",
    "read_source",
    "vit_config",
]
