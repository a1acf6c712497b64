"""Resolving a weights source into tensors in vitzoo's names plus what the source says about them.

A source is one of
    a file        .safetensors, .bin / .pth (torch.load(weights_only=True)), Google .npz
    a directory   vitzoo's save_pretrained layout, a transformers layout or a timm hub layout
                  (each recognised by its config.json), or just a weights file
    "hf-hub:org/repo[@revision]"    the same layouts, downloaded through huggingface_hub
    "timm:<timm model name>"        the weights timm's own loader gives that model

The config.json next to the weights tells the architecture fields no tensor shape reveals (head
count, LayerNorm eps, the source grid for non-square images) and the preprocessing/labels.

When a source names an architecture (vitzoo's "architecture", timm's "architecture") rather than
stating its fields, a `Resolve` callable handed in by the caller says what that name means;
vitzoo/builder.py passes one that asks the registry. This layer never imports the registry.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import layout
from ..layers import to_2tuple
from ..model import ViTConfig
from ..pretrained_cfg import PretrainedCfg
from .errors import WeightsFileError, WeightsMismatchError, WeightsNotFoundError
from .files import StateDict, read_checkpoint, read_json
from .hub import HF_PREFIX, TIMM_PREFIX, WEIGHT_FILES, fetch_repo, parse_hub_ref, require_timm
from .keymaps import TRANSFORMERS_EPS, infer_config_fields, to_vitzoo

LOCAL_WEIGHT_FILES = (*WEIGHT_FILES, "model.pth", "model.npz")


@dataclass(frozen=True)
class Architecture:
    """What a named architecture means, as the caller's registry knows it."""

    name: str  # the vitzoo name
    config: dict[str, Any] | None  # its ViTConfig fields (None: its builder makes no ViT)
    default_cfg: PretrainedCfg | None  # its preprocessing without weights


# A vitzoo name, or a timm architecture name ("vit_base_patch16_224"), -> what it is, or None.
Resolve = Callable[[str], "Architecture | None"]


def _no_names(name: str) -> Architecture | None:
    return None


@dataclass
class SourceData:
    """A loaded source: tensors in our names and what is known about them."""

    state: StateDict
    file: str  # shown in every error message
    format: str  # the key layout the tensors came in
    config: dict[str, Any] = field(default_factory=dict)  # ViTConfig fields the source determines
    pretrained: dict[str, Any] = field(default_factory=dict)  # PretrainedCfg fields (preprocessing, labels)
    src_grid: tuple[int, int] | None = None  # the checkpoint's patch grid, when its config says
    architecture: str | None = None  # a registered vitzoo name, when the source names one

    @property
    def declared(self) -> set[str]:
        """Config fields the source *states* (rather than ones inferred from shapes)."""
        return set(self.config.get("_declared", ()))


def load_source(source: str | os.PathLike[str], resolve: Resolve | None = None) -> SourceData:
    """Read any supported source (see the module docstring); `resolve` explains architecture names."""
    resolve = resolve or _no_names
    if isinstance(source, str) and source.startswith(HF_PREFIX):
        ref = parse_hub_ref(source)
        weights, config = fetch_repo(ref)
        data = _from_files(weights, config, label=str(ref), resolve=resolve)
        data.pretrained.setdefault("source", str(ref))
        return data
    if isinstance(source, str) and source.startswith(TIMM_PREFIX):
        return _from_timm(source[len(TIMM_PREFIX) :])
    path = Path(source)
    if path.is_dir():
        config = path / "config.json"
        found = next((path / n for n in LOCAL_WEIGHT_FILES if (path / n).is_file()), None)
        if found is None:
            raise WeightsNotFoundError(
                f"directory {str(path)!r} has no weights file; expected one of {', '.join(LOCAL_WEIGHT_FILES)}"
            )
        return _from_files(found, config if config.is_file() else None, label=str(found), resolve=resolve)
    if path.is_file():
        return _from_files(path, None, label=str(path), resolve=resolve)
    raise WeightsNotFoundError(
        f"weights source {str(source)!r} is neither an existing file or directory, nor 'hf-hub:org/repo[@rev]', "
        "nor 'timm:<model name>'"
    )


def _from_files(weights: Path, config_path: Path | None, *, label: str, resolve: Resolve) -> SourceData:
    raw = read_checkpoint(weights)
    converted = to_vitzoo(raw, file=label)
    del raw
    data = SourceData(converted.state, label, converted.format)
    fields = infer_config_fields(converted.state, file=label)
    declared: dict[str, Any] = dict(converted.hints)
    if config_path is not None:
        cfg = read_json(config_path)
        if cfg.get("format") == layout.FORMAT:
            declared.update(_vitzoo_config(cfg, config_path))
            data.pretrained = dict(cfg.get("pretrained_cfg") or {})
            data.architecture = cfg.get("architecture")
        elif cfg.get("model_type") in ("vit", "deit"):
            declared.update(_transformers_config(cfg, config_path))
            data.pretrained = _transformers_labels(cfg, fields.get("num_classes", 0))
        elif "architecture" in cfg:
            more, data.pretrained, data.architecture = _timm_config(cfg, resolve)
            declared.update(more)
        else:
            raise WeightsFileError(
                f'{str(config_path)!r} is not a config vitzoo knows: expected a vitzoo config ("format": '
                '"vitzoo"), a transformers ViT/DeiT config ("model_type") or a timm config ("architecture")'
            )
    if "num_heads" not in declared and data.architecture:
        arch = resolve(data.architecture)
        arch_cfg = arch.config if arch is not None else None
        if arch_cfg is not None:
            for name in ("num_heads", "norm_eps", "global_pool", "pos_embed"):
                declared.setdefault(name, arch_cfg[name])
    img = declared.get("img_size")
    # Fields stated by a config win over those read off the shapes; shapes decide the rest.
    fields.update({k: v for k, v in declared.items() if k != "_declared"})
    if img is not None and "patch_size" in fields:
        (h, w), (ph, pw) = to_2tuple(img), to_2tuple(fields["patch_size"])
        data.src_grid = (h // ph, w // pw)
    fields["_declared"] = sorted(declared)
    data.config = fields
    return data


def _vitzoo_config(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    try:
        return ViTConfig.from_dict(cfg.get("config") or {}).to_dict()
    except (TypeError, ValueError) as e:
        raise WeightsFileError(f"{str(path)!r}: invalid vitzoo config ({e})") from e


def _transformers_config(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise WeightsMismatchError(
            f"{str(path)!r}: hidden_act {act!r} is not supported; vitzoo's MLP uses exact GELU ('gelu')"
        )
    try:
        hidden = int(cfg["hidden_size"])
        fields: dict[str, Any] = dict(
            embed_dim=hidden,
            depth=int(cfg["num_hidden_layers"]),
            num_heads=int(cfg["num_attention_heads"]),
            mlp_ratio=int(cfg["intermediate_size"]) / hidden,
            img_size=cfg.get("image_size", 224),
            patch_size=cfg.get("patch_size", 16),
            in_chans=int(cfg.get("num_channels", 3)),
            qkv_bias=bool(cfg.get("qkv_bias", True)),
            # transformers' ViT and DeiT LayerNorms default to 1e-12, not timm's 1e-6.
            norm_eps=float(cfg.get("layer_norm_eps", TRANSFORMERS_EPS)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise WeightsFileError(f"{str(path)!r}: transformers config lacks or garbles {e}") from e
    for key in ("img_size", "patch_size"):
        if isinstance(fields[key], list):
            fields[key] = tuple(fields[key])
    return fields


def _transformers_labels(cfg: dict[str, Any], num_classes: int) -> dict[str, Any]:
    id2label = cfg.get("id2label") or {}
    out: dict[str, Any] = {}
    if num_classes and len(id2label) == num_classes:
        names = tuple(str(id2label.get(str(i), id2label.get(i, i))) for i in range(num_classes))
        if not all(n == f"LABEL_{i}" for i, n in enumerate(names)):  # transformers' placeholder names
            out["label_names"] = names
    return out


def _timm_config(cfg: dict[str, Any], resolve: Resolve) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    arch = resolve(str(cfg["architecture"]).split(".")[0])
    ours = arch.name if arch is not None else None
    fields: dict[str, Any] = {}
    args = dict(cfg.get("model_args") or {})
    for key in (
        "img_size",
        "patch_size",
        "in_chans",
        "embed_dim",
        "depth",
        "num_heads",
        "mlp_ratio",
        "qkv_bias",
        "class_token",
        "global_pool",
    ):
        if key in args:
            value = args[key]
            fields[key] = tuple(value) if isinstance(value, list) else value
    pcfg = dict(cfg.get("pretrained_cfg") or {})
    if "img_size" not in fields and pcfg.get("input_size"):
        fields["img_size"] = tuple(pcfg["input_size"][1:])
    if cfg.get("global_pool") in ("token", "avg"):
        fields["global_pool"] = cfg["global_pool"]
    keep = ("input_size", "mean", "std", "interpolation", "crop_pct", "num_classes", "label_names", "license")
    pretrained = {k: pcfg[k] for k in keep if pcfg.get(k) is not None}
    if "label_names" not in pretrained and cfg.get("label_names"):
        pretrained["label_names"] = cfg["label_names"]
    return fields, pretrained, ours


def _from_timm(name: str) -> SourceData:
    """Take the weights from timm's own loader (it downloads through huggingface_hub too)."""
    timm = require_timm(f"{TIMM_PREFIX}{name}")

    try:
        model = timm.create_model(name, pretrained=True)
    except RuntimeError as e:
        raise WeightsNotFoundError(f"timm:{name}: timm could not create or load it ({e})") from e
    state = {k: v for k, v in model.state_dict().items()}
    label = f"timm:{name}"
    converted = to_vitzoo(state, file=label)
    fields = infer_config_fields(converted.state, file=label)
    blocks = getattr(model, "blocks", None)
    if blocks is not None and len(blocks):
        fields["num_heads"] = int(blocks[0].attn.num_heads)
        fields["norm_eps"] = float(blocks[0].norm1.eps)
    fields["global_pool"] = getattr(model, "global_pool", "token") or "token"
    img = tuple(model.patch_embed.img_size)
    fields["img_size"] = img
    pcfg = dict(model.pretrained_cfg)
    keep = ("input_size", "mean", "std", "interpolation", "crop_pct", "num_classes", "label_names", "license")
    pretrained = {k: pcfg[k] for k in keep if pcfg.get(k) is not None}
    pretrained["source"] = label
    fields["_declared"] = ["num_heads", "norm_eps", "global_pool", "img_size"]
    data = SourceData(converted.state, label, "timm", fields, pretrained)
    data.src_grid = tuple(model.patch_embed.grid_size)
    return data
