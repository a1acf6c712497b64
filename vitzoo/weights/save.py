"""Writing weights: vitzoo's own layout (`save_pretrained`), timm files (`export`), conversion
between layouts (`convert`) and fetching hub weights ahead of time (`download`).

vitzoo's layout, a directory with
    config.json        {"format": "vitzoo", "format_version": 1, "architecture": <name or null>,
                        "config": <ViTConfig fields>, "pretrained_cfg": <preprocessing, labels>}
    model.safetensors  the state dict in vitzoo's (= timm's) names
Each file is written atomically, weights first: a config.json is only there once its weights are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from .convert import to_timm
from .errors import WeightsError, WeightsMismatchError, WeightsNotFoundError
from .files import write_json, write_safetensors
from .hub import HF_PREFIX, TIMM_PREFIX, HubRef, fetch_repo, parse_hub_ref
from .sources import VITZOO_FORMAT

FORMAT_VERSION = 1
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
EXPORT_FORMATS = ("timm", "vitzoo")


def save_pretrained(model: nn.Module, directory: str | os.PathLike[str]) -> Path:
    """Write `model` as config.json + model.safetensors into `directory` (created if needed)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise TypeError(f"save_pretrained needs a vitzoo VisionTransformer (with a .config), got {type(model).__name__}")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"save_pretrained: {str(directory)!r} exists and is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors(directory / WEIGHTS_NAME, model.state_dict(), metadata={"format": "pt"})
    pcfg = getattr(model, "pretrained_cfg", None)
    write_json(
        directory / CONFIG_NAME,
        {
            "format": VITZOO_FORMAT,
            "format_version": FORMAT_VERSION,
            "architecture": getattr(model, "architecture", None),
            "config": config.to_dict(),
            "pretrained_cfg": pcfg.to_dict() if pcfg is not None else {},
        },
    )
    return directory


def export(model: nn.Module, format: str, path: str | os.PathLike[str]) -> Path:
    """Write `model` for another library. "timm": a safetensors file that
    `timm.create_model(<timm name>, pretrained=True, pretrained_cfg_overlay=dict(file=path))` loads
    with identical logits; "vitzoo": `save_pretrained` into the directory `path`."""
    if format == "vitzoo":
        return save_pretrained(model, path)
    if format != "timm":
        raise ValueError(f"unknown export format {format!r}; expected one of {', '.join(EXPORT_FORMATS)}")
    config = getattr(model, "config", None)
    if config is not None:
        problems = []
        if getattr(config, "pos_embed", "learned") != "learned":
            problems.append("fixed sincos position embedding (timm's ViT learns it)")
        if not getattr(config, "final_norm", True):
            problems.append("no final LayerNorm")
        if problems:
            raise WeightsMismatchError(f"cannot export to timm: this model has {' and '.join(problems)}")
    state = to_timm(model.state_dict(), what=f"{type(model).__name__} {getattr(model, 'architecture', '') or ''}".strip())
    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(f"export to timm writes a safetensors file: expected a path ending in .safetensors, got {str(path)!r}")
    return write_safetensors(path, state, metadata={"format": "pt"})


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, to: str = "vitzoo", model: Any = None) -> Path:
    """Read `src` (any source load_weights takes) and write it to `dst` in vitzoo's layout
    (a directory; or a single file if `dst` ends in .safetensors) or as a timm safetensors file.

    `model` names the architecture (a registered name, e.g. "vit_b16") when the source does not
    state it (a bare weights file); it may also change num_classes/img_size via adaptation by
    passing a model instance already built as wanted."""
    from ..registry import create
    from .load import from_pretrained, load_weights

    if to not in EXPORT_FORMATS:
        raise ValueError(f"convert: unknown target format to={to!r}; expected one of {', '.join(EXPORT_FORMATS)}")
    if model is None:
        built = from_pretrained(src)
    elif isinstance(model, str):
        built = create(model, weights=src)
    elif isinstance(model, nn.Module):
        load_weights(model, src)
        built = model
    else:
        raise TypeError(f"convert: model must be None, a registered name or an nn.Module, got {type(model).__name__}")
    dst = Path(dst)
    if to == "timm":
        return export(built, "timm", dst if dst.suffix == ".safetensors" else dst / WEIGHTS_NAME)
    if dst.suffix == ".safetensors":
        return write_safetensors(dst, built.state_dict(), metadata={"format": "pt"})
    return save_pretrained(built, dst)


def download(name_or_source: str) -> list[Path]:
    """Fetch a model's weights into the Hugging Face cache ahead of time (for offline use later)
    and return the cached files. Takes a registered name ("vit_b16", "vit_b16.augreg_in21k_ft_in1k"),
    "hf-hub:org/repo[@rev]" or "timm:<timm name>"."""
    source = name_or_source
    if not (source.startswith(HF_PREFIX) or source.startswith(TIMM_PREFIX)):
        from ..registry import get_pretrained_cfg

        entry, pcfg = get_pretrained_cfg(source)
        if pcfg is None or pcfg.source is None:
            raise WeightsError(f"model {entry.name!r} has no pretrained weights to download")
        source = pcfg.source
    if source.startswith(TIMM_PREFIX):
        ref = _timm_hub_ref(source[len(TIMM_PREFIX):])
    elif source.startswith(HF_PREFIX):
        ref = parse_hub_ref(source)
    else:
        path = Path(source)
        if not path.exists():
            raise WeightsNotFoundError(f"{name_or_source!r}: its weights source {source!r} does not exist")
        return [path]
    weights, config = fetch_repo(ref)
    return [weights] + ([config] if config is not None else [])


def _timm_hub_ref(name: str) -> HubRef:
    import timm

    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except RuntimeError:
        cfg = None
    hub_id = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    if not hub_id:
        raise WeightsNotFoundError(f"timm:{name}: timm knows no Hugging Face Hub weights for this name")
    if hub_id.endswith("/"):  # timm writes "timm/" meaning "timm/<name>"
        hub_id = hub_id + name
    return parse_hub_ref(hub_id)
