"""Resolving a weights source into tensors in vitzoo's names plus what the source says about them.

A source is one of
    a file        .safetensors, .bin / .pth (torch.load(weights_only=True)), Google .npz
    a directory   vitzoo's save_pretrained layout, a transformers layout or a timm hub layout
                  (each recognised by its config.json), or just a weights file
    "hf-hub:org/repo[@revision]"    the same layouts, downloaded through huggingface_hub
    "timm:<timm model name>"        the weights timm's own loader gives that model

The config.json next to the weights tells the architecture fields no tensor shape reveals (head
count, LayerNorm eps, activation, LayerScale's init value, the source grid for non-square images
and whether the position embedding covers the prefix tokens) and the preprocessing/labels; for a
transformers checkpoint (transformers_files.py), its preprocessor_config.json (the image
processor) tells the preprocessing.
Layouts whose files state no preprocessing (torchvision .pth, Google .npz, bare timm files) imply
their library's evaluation transform and, by class count, the ImageNet label set (`SourceData.implied`).

When a source names an architecture (vitzoo's "architecture", timm's "architecture") rather than
stating its fields, a `Resolve` callable handed in by the caller says what that name means;
vitzoo/builder.py passes one that asks the registry. This layer never imports the registry.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from .. import layout
from ..checks import check_image_bounds, check_types
from ..layers import to_2tuple
from ..model import ViTConfig
from ..pretrained_cfg import (
    CROP_MODES,
    IMAGENET_MEAN,
    IMAGENET_STD,
    INCEPTION_MEAN,
    INCEPTION_STD,
    PretrainedCfg,
    imagenet_label_set,
)
from .errors import WeightsFileError, WeightsMismatchError, WeightsNotFoundError
from .files import StateDict, checked_pretrained, read_checkpoint, read_json
from .hub import HF_PREFIX, PREPROCESSOR_FILE, TIMM_PREFIX, WEIGHT_FILES, fetch_repo, parse_hub_ref, require_timm
from .keymaps import CLASSIC_FIELDS, infer_config_fields, position_prefix, to_vitzoo
from .transformers_files import (
    FAMILIES,
    MODEL_TYPES,
    family_of,
    transformers_config,
    transformers_labels,
    transformers_preprocessing,
)

logger = logging.getLogger("vitzoo.weights")

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
    pretrained: dict[str, Any] = field(default_factory=dict)  # PretrainedCfg fields the source states
    # PretrainedCfg fields the layout implies where its files state none (torchvision's transform,
    # timm's cfg for Google .npz, the ImageNet label set by class count); see load._pretrained_cfg.
    implied: dict[str, Any] = field(default_factory=dict)
    src_grid: tuple[int, int] | None = None  # the checkpoint's patch grid, when its config says
    architecture: str | None = None  # a registered vitzoo name, when the source names one
    # How a position embedding is resampled to another grid: antialiased bicubic (timm), or plain
    # bicubic where the source's own library resamples so (transformers' Dinov2Model).
    pos_antialias: bool = True

    @property
    def declared(self) -> set[str]:
        """Config fields the source *states* (rather than ones inferred from shapes)."""
        return set(self.config.get("_declared", ()))


def load_source(source: str | os.PathLike[str], resolve: Resolve | None = None) -> SourceData:
    """Read any supported source (see the module docstring); `resolve` explains architecture names."""
    resolve = resolve or _no_names
    if isinstance(source, str) and source.startswith(HF_PREFIX):
        ref = parse_hub_ref(source)
        weights, config, preprocessor = fetch_repo(ref)
        data = _from_files(weights, config, label=str(ref), resolve=resolve, preprocessor=preprocessor)
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
        preprocessor = path / PREPROCESSOR_FILE
        return _from_files(
            found,
            config if config.is_file() else None,
            label=str(found),
            resolve=resolve,
            preprocessor=preprocessor if preprocessor.is_file() else None,
        )
    if path.is_file():
        return _from_files(path, None, label=str(path), resolve=resolve)
    raise WeightsNotFoundError(
        f"weights source {str(source)!r} is neither an existing file or directory, nor 'hf-hub:org/repo[@rev]', "
        "nor 'timm:<model name>'"
    )


def _from_files(
    weights: Path, config_path: Path | None, *, label: str, resolve: Resolve, preprocessor: Path | None = None
) -> SourceData:
    raw = read_checkpoint(weights)
    converted = to_vitzoo(raw, file=label)
    del raw
    data = SourceData(converted.state, label, converted.format)
    inferred = infer_config_fields(converted.state, file=label)
    fields = dict(inferred)
    declared: dict[str, Any] = dict(converted.hints)
    states_all = False  # a vitzoo or transformers config: its preprocessing and labels are all there is
    model_img: Any = None  # an input size the model is built for, other than its position grid's
    if config_path is not None:
        where = str(config_path)
        cfg = read_json(config_path)
        # The config is untrusted input: fields are type-checked, and those the tensors also tell
        # (widths, depth, classes, grid) must agree with them, before anything is built from them.
        stated: dict[str, Any] = {}
        unconfirmed_img: Any = None  # an image size from preprocessing data, not the architecture
        family = family_of(cfg)
        if cfg.get("format") == layout.FORMAT:
            stated = _vitzoo_config(cfg, config_path)
            states_all = True
            pretrained = cfg.get("pretrained_cfg") or {}
            data.architecture = _optional_str(cfg, "architecture", where)
        elif family is not None:
            stated = transformers_config(cfg, config_path)
            states_all = True
            pretrained = transformers_labels(cfg, inferred["num_classes"], where)
            if preprocessor is not None:
                pretrained.update(transformers_preprocessing(read_json(preprocessor), str(preprocessor)))
            antialias = FAMILIES[family].position_antialias
            if antialias is not None:
                # transformers' DINOv2 resamples its position grid (trained at 518) to whatever its
                # processor feeds it (224): built for that input, the model computes the same.
                data.pos_antialias = antialias
                if "input_size" in pretrained:
                    model_img = tuple(pretrained["input_size"][1:])
        elif "architecture" in cfg:
            stated, pretrained, data.architecture, unconfirmed_img = _timm_config(cfg, resolve, where)
        else:
            raise WeightsFileError(
                f'{where!r} is not a config vitzoo knows: expected a vitzoo config ("format": "vitzoo"), '
                'a transformers config ("model_type": ' + ", ".join(map(repr, MODEL_TYPES)) + ") "
                'or a timm config ("architecture")'
            )
        _check_stated(stated, inferred, converted.state, config=where, weights=label)
        declared.update(stated)
        if unconfirmed_img is not None and "img_size" not in stated:
            patch = to_2tuple(inferred["patch_size"])
            grid = (-(-unconfirmed_img[0] // patch[0]), -(-unconfirmed_img[1] // patch[1]))
            _check_bounds(unconfirmed_img, grid, where)
            declared["img_size"] = unconfirmed_img
        data.pretrained = checked_pretrained(pretrained, where)
    if data.architecture:
        arch = resolve(data.architecture)
        arch_cfg = arch.config if arch is not None else None
        if arch_cfg is not None:
            # What no tensor shows: the head count, the LayerNorm eps, the pooling, sinusoidal
            # positions, LayerScale's init value. (Not the activation: a timm config names the
            # architecture its weights were run with, and the registry may know another tag's.)
            for name in ("num_heads", "norm_eps", "global_pool", "pos_embed", "init_values"):
                if name in arch_cfg and (name != "init_values" or "init_values" in inferred):
                    declared.setdefault(name, arch_cfg[name])
    img = declared.get("img_size")
    # Fields stated by a config win over those read off the shapes; shapes decide the rest.
    fields.update({k: v for k, v in declared.items() if k != "_declared"})
    if img is not None and "patch_size" in fields:
        (h, w), (ph, pw) = to_2tuple(img), to_2tuple(fields["patch_size"])
        data.src_grid = (h // ph, w // pw)
        _settle_no_embed_class(fields, declared, converted.state, data.src_grid)
    if model_img is not None and img is not None and model_img != to_2tuple(img):
        declared["img_size"] = fields["img_size"] = model_img[0] if model_img[0] == model_img[1] else model_img
    fields["_declared"] = sorted(declared)
    data.config = fields
    if not states_all:
        # timm, torchvision and Google layouts: what their libraries evaluate these weights with.
        data.implied = _layout_preprocessing(data.format, fields)
        label_set = imagenet_label_set(fields.get("num_classes", 0))
        if label_set is not None and "label_names" not in data.pretrained:
            data.implied["label_set"] = label_set
    return data


def _settle_no_embed_class(
    fields: dict[str, Any], declared: dict[str, Any], state: StateDict, grid: tuple[int, int]
) -> None:
    """With the patch grid known, whether the position embedding covers the prefix tokens is
    exact (infer_config_fields could only guess it from a square grid)."""
    pos = state.get("pos_embed")
    if pos is None or "no_embed_class" in declared:
        return
    prefix = int(fields.get("class_token", True)) + int(fields.get("distilled", False)) + fields.get("reg_tokens", 0)
    covered = position_prefix(pos.shape[1], prefix, grid)
    if covered is not None:
        fields["no_embed_class"] = covered != prefix


def _layout_preprocessing(fmt: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The evaluation preprocessing a layout's own library uses for weights that state none.

    torchvision (`ViT_*_Weights`): IMAGENET1K_V1 resizes the short side to 256 (vit_l_16: 242),
    crops 224, bilinear, ImageNet mean/std; the SWAG_E2E weights (384, 512, 518) resize straight to
    the crop size, bicubic. Google .npz: timm's cfgs for these releases (`vit_*.augreg_*`,
    `*.orig_in21k*`): mean/std 0.5, bicubic, crop_pct 0.9 at 224 and 1.0 at larger sizes."""
    img = fields.get("img_size")
    side = max(to_2tuple(img)) if img is not None else 224
    if fmt == "torchvision":
        if side <= 224:
            resize = 242 if fields.get("embed_dim") == 1024 and fields.get("patch_size") == 16 else 256
            return dict(
                mean=IMAGENET_MEAN,
                std=IMAGENET_STD,
                interpolation="bilinear",
                crop_pct=224 / resize,
                crop_mode="center",
            )
        return dict(mean=IMAGENET_MEAN, std=IMAGENET_STD, interpolation="bicubic", crop_pct=1.0, crop_mode="center")
    if fmt == "npz":
        return dict(
            mean=INCEPTION_MEAN,
            std=INCEPTION_STD,
            interpolation="bicubic",
            crop_pct=0.9 if side <= 224 else 1.0,
            crop_mode="center",
        )
    return {}


# The fields a checkpoint's tensors state, each with the tensor (shape) that states it. A config
# that disagrees describes some other model: building it would allocate for the config's sizes
# (new heads, adapted convolutions, sinusoid tables) before the shapes could object.
_STATED_BY: dict[str, str] = {
    "embed_dim": "patch_embed.proj.weight",
    "in_chans": "patch_embed.proj.weight",
    "patch_size": "patch_embed.proj.weight",
    "conv_stem": "patch_embed.stem.*.weight",
    "patch_bias": "patch_embed.proj.bias",
    "depth": "blocks.<i>.*",
    "num_classes": "head.weight",
    "head_bias": "head.bias",
    "representation_size": "pre_logits.fc.weight",
    "class_token": "cls_token",
    "distilled": "dist_token",
    "reg_tokens": "reg_token",
    "pre_norm": "norm_pre.weight",
    "final_norm": "norm.weight",
    "fc_norm": "fc_norm.weight",
    "qkv_bias": "blocks.0.attn.qkv.bias",
}


def _check_stated(
    stated: dict[str, Any], inferred: dict[str, Any], state: StateDict, *, config: str, weights: str
) -> None:
    """Raise WeightsFileError for a stated field of the wrong type or out of bounds, and
    WeightsMismatchError for one that disagrees with the tensors in `weights`."""
    try:
        check_types(stated, ViTConfig.field_types())
    except TypeError as e:
        raise WeightsFileError(f"{config!r}: {e}") from e

    def mismatch(name: str, value: Any, tensors: str, found: Any) -> WeightsMismatchError:
        return WeightsMismatchError(
            f"{config!r} states {name}={value!r}, but the weights in {weights} have {name}={found!r} "
            f"(from {tensors}); expected the config to describe these weights"
        )

    stem = "patch_embed.stem.0.weight" in state
    depth, dim = inferred["depth"], inferred["embed_dim"]
    for name, tensors in _STATED_BY.items():
        if (
            name not in stated
            or (name == "qkv_bias" and not depth)
            or (name == "head_bias" and "head.weight" not in state)
        ):
            continue
        # infer_config_fields leaves out the newer options where they have a classic ViT's value
        shown = inferred.get(name, CLASSIC_FIELDS.get(name))
        value, found = stated[name], shown
        if name == "patch_size":
            value, found = to_2tuple(value, name), to_2tuple(inferred[name], name)
        if name == "in_chans" and stem:
            tensors = "patch_embed.stem.0.weight"
        if value != found:
            raise mismatch(name, stated[name], tensors, shown)
    if "init_values" in stated and depth and (stated["init_values"] is None) != ("init_values" not in inferred):
        found = "a number (LayerScale)" if "init_values" in inferred else None
        raise mismatch("init_values", stated["init_values"], "blocks.0.ls1.gamma", found)
    if "global_pool" in stated and (stated["global_pool"] == "map") != (inferred["global_pool"] == "map"):
        raise mismatch("global_pool", stated["global_pool"], "attn_pool.latent", inferred["global_pool"])
    if "norm_eps" in stated and not stated["norm_eps"] > 0:
        raise WeightsFileError(f"{config!r}: norm_eps={stated['norm_eps']!r} is invalid; expected a positive number")
    if "mlp_ratio" in stated and depth:
        hidden = int(state["blocks.0.mlp.fc1.weight"].shape[0])
        if int(dim * stated["mlp_ratio"]) != hidden:
            raise mismatch("mlp_ratio", stated["mlp_ratio"], "blocks.0.mlp.fc1.weight", hidden / dim)
    pos = state.get("pos_embed")
    if stated.get("pos_embed") == "sincos" and pos is not None:
        raise mismatch("pos_embed", "sincos", "pos_embed", "learned")
    if stated.get("pos_embed") == "learned" and pos is None:
        raise mismatch("pos_embed", "learned", "no pos_embed tensor", "sincos")
    if "img_size" not in stated:
        return
    img, patch = to_2tuple(stated["img_size"], "img_size"), to_2tuple(inferred["patch_size"], "patch_size")
    grid = (-(-img[0] // patch[0]), -(-img[1] // patch[1]))
    if pos is not None:
        prefix = int(inferred["class_token"]) + int(inferred["distilled"]) + inferred.get("reg_tokens", 0)
        if stated.get("no_embed_class") is not None:  # the config says which: only that layout fits
            prefix = 0 if stated["no_embed_class"] else prefix
        covered = position_prefix(pos.shape[1], prefix, grid)
        if covered is None:
            raise WeightsMismatchError(
                f"{config!r} states img_size={stated['img_size']!r}, a {grid[0]}x{grid[1]} grid of "
                f"patch_size {inferred['patch_size']!r}, but pos_embed in {weights} has shape {tuple(pos.shape)}: "
                f"{pos.shape[1] - prefix} grid positions; expected the config to describe these weights"
            )
    else:
        _check_bounds(img, grid, config)


def _check_bounds(img: tuple[int, int], grid: tuple[int, int], config: str) -> None:
    try:
        check_image_bounds(img, grid)
    except ValueError as e:
        raise WeightsFileError(f"{config!r}: {e} (an image size that no tensor confirms is bounded)") from e


def _optional_str(cfg: dict[str, Any], key: str, where: str) -> str | None:
    value = cfg.get(key)
    if value is not None and not isinstance(value, str):
        raise WeightsFileError(f"{where!r}: {key}={value!r} is invalid; expected a string or null")
    return value


def _vitzoo_config(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    fields = cfg.get("config") or {}
    if not isinstance(fields, dict):
        raise WeightsFileError(
            f"{str(path)!r}: config={fields!r} is invalid; expected a JSON object of ViTConfig fields"
        )
    try:
        return ViTConfig.from_dict(fields).to_dict()
    except (TypeError, ValueError) as e:
        raise WeightsFileError(f"{str(path)!r}: invalid vitzoo config ({e})") from e


_TIMM_ARGS = (
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
    "init_values",
    "reg_tokens",
    "no_embed_class",
    "pre_norm",
    "fc_norm",
    "act_layer",
)
# timm's activation names (timm.layers.get_act_layer) that vitzoo computes, -> ViTConfig.act_layer.
_TIMM_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_tanh", "quick_gelu": "quick_gelu"}


def _timm_config(
    cfg: dict[str, Any], resolve: Resolve, where: str
) -> tuple[dict[str, Any], dict[str, Any], str | None, tuple[int, int] | None]:
    """timm's config: the architecture fields its model_args state, its preprocessing and labels,
    the vitzoo name of its architecture, and the image size its preprocessing names (which is not
    an architecture fact: timm keeps a pretrained cfg's input_size when img_size is overridden)."""
    name = cfg["architecture"]
    if not isinstance(name, str):
        raise WeightsFileError(f"{where!r}: architecture={name!r} is invalid; expected a string")
    arch = resolve(name.split(".")[0])
    ours = arch.name if arch is not None else None
    args, pcfg = cfg.get("model_args") or {}, cfg.get("pretrained_cfg") or {}
    for key, value in (("model_args", args), ("pretrained_cfg", pcfg)):
        if not isinstance(value, dict):
            raise WeightsFileError(f"{where!r}: {key}={value!r} is invalid; expected a JSON object")
    fields: dict[str, Any] = {}
    for key in _TIMM_ARGS:
        if args.get(key) is not None:  # timm's None means "the architecture's default"
            value = args[key]
            fields[key] = tuple(value) if isinstance(value, list) else value
    if "act_layer" in fields:
        act = fields["act_layer"]
        if act not in _TIMM_ACTIVATIONS:
            raise WeightsFileError(
                f"{where!r}: model_args act_layer={act!r} is not supported; expected one of "
                + ", ".join(map(repr, _TIMM_ACTIVATIONS))
            )
        fields["act_layer"] = _TIMM_ACTIVATIONS[act]
    if cfg.get("global_pool") in ("token", "avg", "map"):
        fields["global_pool"] = cfg["global_pool"]
    pretrained = _timm_pretrained(pcfg, where)
    if "label_names" not in pretrained and cfg.get("label_names"):
        pretrained["label_names"] = cfg["label_names"]
    pretrained = checked_pretrained(pretrained, where)
    size = pretrained.get("input_size")
    return fields, pretrained, ours, (size[1], size[2]) if size is not None else None


_TIMM_KEEP = (
    "input_size",
    "mean",
    "std",
    "interpolation",
    "crop_pct",
    "crop_mode",
    "num_classes",
    "label_names",
    "license",
)


def _timm_pretrained(pcfg: dict[str, Any], where: str) -> dict[str, Any]:
    """The PretrainedCfg fields of timm's pretrained cfg. A crop mode vitzoo does not implement
    (timm's "border") is left out with a warning: the weights still load, preprocessed "center"."""
    pretrained = {k: pcfg[k] for k in _TIMM_KEEP if pcfg.get(k) is not None}
    mode = pretrained.get("crop_mode")
    if mode is not None and mode not in CROP_MODES:
        logger.warning("%s: crop_mode %r is not one vitzoo implements (%s); using 'center'", where, mode, CROP_MODES)
        del pretrained["crop_mode"]
    return pretrained


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
        fields["act_layer"] = _timm_activation(blocks[0].mlp.act, label)
    fields["global_pool"] = getattr(model, "global_pool", "token") or "token"
    fields["no_embed_class"] = bool(getattr(model, "no_embed_class", False))
    img = tuple(model.patch_embed.img_size)
    fields["img_size"] = img
    pretrained = _timm_pretrained(dict(model.pretrained_cfg), label)
    pretrained["source"] = label
    fields["_declared"] = [k for k in ("num_heads", "norm_eps", "act_layer") if k in fields]
    fields["_declared"] += ["global_pool", "no_embed_class", "img_size"]
    data = SourceData(converted.state, label, "timm", fields, checked_pretrained(pretrained, label))
    label_set = imagenet_label_set(fields.get("num_classes", 0))
    if label_set is not None and "label_names" not in pretrained:
        data.implied["label_set"] = label_set
    data.src_grid = tuple(model.patch_embed.grid_size)
    return data


def _timm_activation(act: nn.Module, label: str) -> str:
    """The ViTConfig.act_layer of a timm MLP's activation module."""
    name = type(act).__name__
    if isinstance(act, nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    if name in ("GELUTanh", "QuickGELU"):  # timm.layers.activations
        return {"GELUTanh": "gelu_tanh", "QuickGELU": "quick_gelu"}[name]
    if name == "GELU":  # timm's own GELU module (exact)
        return "gelu"
    raise WeightsMismatchError(
        f"{label}: the MLP activation {name} is not one vitzoo computes; expected GELU, its tanh "
        "approximation or QuickGELU"
    )
