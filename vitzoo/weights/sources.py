"""Reading a weights source into a `Checkpoint` (checkpoint.py): tensors in vitzoo's names plus what
the source says about them.

A source is one of
    a file        .safetensors, .bin / .pth (torch.load(weights_only=True)), Google .npz
    a directory   vitzoo's save_pretrained layout, a transformers layout or a timm hub layout
                  (each recognised by its config.json), or just a weights file
    "hf-hub:org/repo[@revision]"    the same layouts, downloaded through huggingface_hub (hub.py)
    "timm:<timm model name>"        the weights timm's own loader gives that model (timm_files.py)

The config.json next to the weights tells the architecture fields no tensor shape reveals (head
count, LayerNorm eps, activation, LayerScale's init value, the source grid for non-square images
and whether the position embedding covers the prefix tokens) and the preprocessing/labels; for a
transformers checkpoint (transformers_files.py), its preprocessor_config.json (the image
processor) tells the preprocessing. Every stated field is checked against the tensors (verify.py)
before anything is built from it.
Layouts whose files state no preprocessing (torchvision .pth, Google .npz, bare timm files) imply
their library's evaluation transform and, by class count, the ImageNet label set (`Checkpoint.implied`).

When a config names an architecture (vitzoo's or timm's "architecture") rather than stating all
its fields, the name is kept (`Checkpoint.names`) for the caller to explain: this layer never
imports the registry.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import layout
from ..layers import to_2tuple
from ..model import ViTConfig
from ..pretrained_cfg import IMAGENET_MEAN, IMAGENET_STD, INCEPTION_MEAN, INCEPTION_STD, imagenet_label_set
from .checkpoint import Checkpoint
from .errors import WeightsFileError, WeightsNotFoundError
from .files import StateDict, check_complete, checked_pretrained, read_checkpoint, read_json, read_shapes, save_id_of
from .hub import HF_PREFIX, PREPROCESSOR_FILE, TIMM_PREFIX, WEIGHT_FILES, fetch_repo, parse_hub_ref
from .keymaps import to_vitzoo
from .shapes import infer_config_fields, position_prefix
from .timm_files import read_timm, timm_config
from .transformers_files import (
    FAMILIES,
    MODEL_TYPES,
    family_of,
    radio_input,
    refuse_remote_radio,
    sam3_model_size,
    transformers_config,
    transformers_labels,
    transformers_preprocessing,
)
from .verify import check_bounds, check_stated

LOCAL_WEIGHT_FILES = (*WEIGHT_FILES, "model.pth", "model.npz")


def read_source(source: str | os.PathLike[str]) -> Checkpoint:
    """Read any supported source (see the module docstring)."""
    if isinstance(source, str) and source.startswith(HF_PREFIX):
        ref = parse_hub_ref(source)
        weights, config, preprocessor = fetch_repo(ref)
        ckpt = _from_files(weights, config, label=str(ref), preprocessor=preprocessor)
        ckpt.pretrained.setdefault("source", str(ref))
        return ckpt
    if isinstance(source, str) and source.startswith(TIMM_PREFIX):
        return read_timm(source[len(TIMM_PREFIX) :])
    path = Path(source)
    if path.is_dir():
        config = path / "config.json"
        found = _weights_in(path)
        if found is None:
            raise WeightsNotFoundError(
                f"directory {str(path)!r} has no weights file; expected one of {', '.join(LOCAL_WEIGHT_FILES)}"
            )
        preprocessor = path / PREPROCESSOR_FILE
        return _from_files(
            found,
            config if config.is_file() else None,
            label=str(found),
            preprocessor=preprocessor if preprocessor.is_file() else None,
        )
    if path.is_file():
        return _from_files(path, None, label=str(path))
    raise WeightsNotFoundError(
        f"weights source {str(source)!r} is neither an existing file or directory, nor 'hf-hub:org/repo[@rev]', "
        "nor 'timm:<model name>'"
    )


def _weights_in(directory: Path, *, warn: bool = True) -> Path | None:
    """A folder's weights file: the first of LOCAL_WEIGHT_FILES in it, but where it holds both a
    model.safetensors and a sharded index, the one `_single_or_sharded` picks."""
    found = [directory / name for name in LOCAL_WEIGHT_FILES if (directory / name).is_file()]
    if [p.name for p in found[:2]] == list(WEIGHT_FILES[:2]):
        return _single_or_sharded(found[0], found[1], warn=warn)
    return found[0] if found else None


def _single_or_sharded(single: Path, index: Path, *, warn: bool) -> Path:
    """Which to read of a folder's model.safetensors and sharded index (with its shards), said in a
    warning naming both: the one whose save id its config.json states (the other is what an
    interrupted save left); else, where their tensors' names, shapes and dtypes agree, the single
    file, as transformers reads it. Where they disagree nothing tells which is the model: refused."""
    directory = single.parent
    stated = _config_save_id(directory / layout.CONFIG_NAME)
    matching = [p for p in (single, index) if stated is not None and save_id_of(p) == stated]
    if len(matching) == 1:
        chosen = matching[0]
        why = f"the weights its {layout.CONFIG_NAME} was saved with (the other is left from an interrupted save)"
    else:
        problem = _tensors_differ(read_shapes(single), read_shapes(index), (repr(single.name), "its shards"))
        if problem is not None:
            raise WeightsFileError(
                f"{str(directory)!r} holds both {single.name!r} and {index.name!r} (with its shards), which "
                f"disagree: {problem}; delete the one that is not this model's weights"
            )
        chosen = single
        why = "as transformers does (the shards hold the same tensor names, shapes and dtypes; values not compared)"
    if warn:
        warnings.warn(
            f"{str(directory)!r} holds both {single.name!r} and {index.name!r} (with its shards): read "
            f"{chosen.name!r}, {why}; delete the other",
            stacklevel=2,
        )
    return chosen


def _tensors_differ(a: StateDict, b: StateDict, names: tuple[str, str]) -> str | None:
    """How two checkpoints' tensor names, shapes and dtypes differ (the first difference), or None;
    `names` say which is which."""
    for (mine, theirs), (name, other) in (((a, b), names), ((b, a), names[::-1])):
        extra = next((key for key in mine if key not in theirs), None)
        if extra is not None:
            return f"{extra!r} is in {name} only, not in {other}"
    for key, t in a.items():
        if (t.shape, t.dtype) != (b[key].shape, b[key].dtype):
            return f"{key!r} is {tuple(t.shape)} {t.dtype} in {names[0]}, {tuple(b[key].shape)} {b[key].dtype} in {names[1]}"
    return None


def _config_save_id(config: Path) -> str | None:
    """The save id a vitzoo config.json states (layout.SAVE_ID), None where there is none."""
    if not config.is_file():
        return None
    cfg = read_json(config)
    return _optional_str(cfg, layout.SAVE_ID, str(config)) if cfg.get("format") == layout.FORMAT else None


def _check_same_save(config: Path, weights: Path) -> None:
    """WeightsFileError when a vitzoo config.json and its weights state different save ids: one
    save's config with another's weights (a save killed between its renames, a file copied in)."""
    stated = _config_save_id(config)
    found = save_id_of(weights) if stated is not None else None
    if found is not None and found != stated:
        raise WeightsFileError(
            f"{str(config)!r} and {str(weights)!r} are from different saves (save_id {stated} and {found}): "
            "a save_pretrained interrupted between its renames, or a file copied in from another save; save the "
            f'model again, or delete "{layout.SAVE_ID}" from {config.name} to read them together anyway'
        )


def check_local_source(source: str | os.PathLike[str]) -> None:
    """WeightsFileError when `source` is a local file or directory whose weights file is visibly
    truncated (files.check_complete); nothing for a hub or timm source, whose files are fetched later."""
    if isinstance(source, str) and source.startswith((HF_PREFIX, TIMM_PREFIX)):
        return
    path = Path(source)
    found = _weights_in(path, warn=False) if path.is_dir() else path if path.is_file() else None
    if found is not None:
        check_complete(found)


@dataclass
class _Stated:
    """What the config.json next to the weights (and a transformers preprocessor_config.json) state."""

    fields: dict[str, Any] = field(default_factory=dict)  # ViTConfig fields
    pretrained: dict[str, Any] = field(default_factory=dict)  # PretrainedCfg fields
    states_all: bool = False  # a vitzoo or transformers config: its preprocessing and labels are all there is
    architecture: str | None = None  # a vitzoo config's "architecture"
    timm_architecture: str | None = None  # a timm config's "architecture", without tag
    timm_model_args: dict[str, Any] = field(default_factory=dict)  # and the model_args it states
    preprocessing_img: tuple[int, int] | None = None  # an image size from preprocessing data, not the architecture
    model_img: tuple[int, ...] | None = None  # an input size the model is built for, other than its position grid's
    pos_antialias: bool = True


def _from_files(weights: Path, config_path: Path | None, *, label: str, preprocessor: Path | None = None) -> Checkpoint:
    if config_path is not None:
        _check_same_save(config_path, weights)
    raw = read_checkpoint(weights)
    converted = to_vitzoo(raw, file=label)
    del raw
    ckpt = Checkpoint(converted.state, label, converted.format)
    ckpt.pos_mode = converted.pos_mode
    inferred = infer_config_fields(converted.state, file=label)
    declared: dict[str, Any] = dict(converted.hints)
    stated = _Stated()
    if config_path is not None:
        where = str(config_path)
        # The config is untrusted input: fields are type-checked, and those the tensors also tell
        # (widths, depth, classes, grid) must agree with them, before anything is built from them.
        stated = _read_config(config_path, preprocessor, inferred["num_classes"])
        check_stated(stated.fields, inferred, converted.state, config=where, weights=label)
        declared.update(stated.fields)
        # the evaluation size stands for the grid unless the tensors name it (NaFlexVit's table)
        if stated.preprocessing_img is not None and "img_size" not in declared:
            patch = to_2tuple(inferred["patch_size"])
            size = stated.preprocessing_img
            check_bounds(size, (-(-size[0] // patch[0]), -(-size[1] // patch[1])), where)
            declared["img_size"] = size
        ckpt.pretrained = checked_pretrained(stated.pretrained, where)
        ckpt.architecture, ckpt.timm_architecture = stated.architecture, stated.timm_architecture
        ckpt.timm_model_args = stated.timm_model_args
        ckpt.pos_antialias = stated.pos_antialias
    # Fields stated by a config win over those read off the shapes; shapes decide the rest.
    fields = {**inferred, **declared}
    img = declared.get("img_size")
    if img is not None and "patch_size" in fields:
        (h, w), (ph, pw) = to_2tuple(img), to_2tuple(fields["patch_size"])
        ckpt.src_grid = (h // ph, w // pw)
        _settle_no_embed_class(fields, declared, converted.state, ckpt.src_grid)
    model_img = stated.model_img
    if model_img is not None and img is not None and model_img != to_2tuple(img):
        declared["img_size"] = fields["img_size"] = model_img[0] if model_img[0] == model_img[1] else model_img
    ckpt.config, ckpt.declared = fields, set(declared)
    if not stated.states_all:
        # timm, torchvision and Google layouts: what their libraries evaluate these weights with.
        ckpt.implied = _layout_preprocessing(ckpt.format, fields)
        label_set = imagenet_label_set(fields.get("num_classes", 0))
        if label_set is not None and "label_names" not in ckpt.pretrained:
            ckpt.implied["label_set"] = label_set
    return ckpt


def _read_config(config_path: Path, preprocessor: Path | None, num_classes: int) -> _Stated:
    """What a config.json of vitzoo's, transformers' or timm's layout states; `num_classes` (the
    tensors') decides whether transformers' id2label names the classes."""
    where = str(config_path)
    cfg = read_json(config_path)
    refuse_remote_radio(cfg, repr(where))
    family = family_of(cfg)
    if cfg.get("format") == layout.FORMAT:
        fields = _vitzoo_config(cfg, config_path)
        return _Stated(
            fields, cfg.get("pretrained_cfg") or {}, True, architecture=_optional_str(cfg, "architecture", where)
        )
    if family is not None:
        stated = _Stated(transformers_config(cfg, config_path), transformers_labels(cfg, num_classes, where), True)
        if preprocessor is not None:
            stated.pretrained.update(transformers_preprocessing(read_json(preprocessor), str(preprocessor)))
        if family == "radio":  # built for image_size; its table (max_img_size) is cropped at load
            stated.pretrained.update(radio_input(cfg, where))
            stated.model_img = tuple(stated.pretrained["input_size"][1:])
        if family == "sam3_vit_model":  # built for image_size; its table (pretrain_image_size) tiled at load
            stated.model_img = sam3_model_size(cfg, where)
        antialias = FAMILIES[family].position_antialias
        if antialias is not None:
            # transformers' DINOv2 resamples its position grid (trained at 518) to whatever its
            # processor feeds it (224): built for that input, the model computes the same.
            stated.pos_antialias = antialias
            if "input_size" in stated.pretrained:
                stated.model_img = tuple(stated.pretrained["input_size"][1:])
        return stated
    if "architecture" in cfg:
        fields, pretrained, name, img = timm_config(cfg, where)
        args = dict(cfg.get("model_args") or {})  # a JSON object: timm_config checked it
        return _Stated(fields, pretrained, timm_architecture=name, timm_model_args=args, preprocessing_img=img)
    raise WeightsFileError(
        f'{where!r} is not a config vitzoo knows: expected a vitzoo config ("format": "vitzoo"), '
        'a transformers config ("model_type": ' + ", ".join(map(repr, MODEL_TYPES)) + ") "
        'or a timm config ("architecture")'
    )


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
