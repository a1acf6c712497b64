"""`PretrainedCfg`: what a set of weights expects of its input and where it comes from.

It travels with the weights: the preprocessing (input size, mean/std, interpolation, crop_pct)
and the label names are properties of the checkpoint, not of the architecture.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .checks import MAX_IMAGE_SIDE, MAX_TOKENS, check_types

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INCEPTION_MEAN = (0.5, 0.5, 0.5)  # the original ViT and AugReg releases normalise to [-1, 1]
INCEPTION_STD = (0.5, 0.5, 0.5)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI's CLIP statistics (timm and transformers: OPENAI_CLIP_MEAN)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
MNIST_MEAN = (0.1307,)
MNIST_STD = (0.3081,)
# Resampling filters that image libraries (PIL, torchvision) and timm's configs name.
INTERPOLATIONS = ("nearest", "nearest-exact", "bilinear", "bicubic", "box", "hamming", "lanczos")
# How an evaluation image becomes input_size (timm's names and meaning): "center" resizes the short
# side to size / crop_pct and crops the centre (timm, torchvision); "squash" resizes to exactly
# (H, W) / crop_pct, aspect ratio lost, and crops the centre: crop_pct 1.0 is transformers'
# ViTImageProcessor, 224/256 its DeiTImageProcessor (256x256, then the central 224x224).
CROP_MODES = ("center", "squash")
_SEQUENCES = ("input_size", "mean", "std", "label_names")  # tuples here, lists in JSON


@dataclass(frozen=True)
class PretrainedCfg:
    """Plain data: `dataclasses.asdict(cfg)` / `cfg.to_dict()` gives JSON-ready values."""

    input_size: tuple[int, int, int] = (3, 224, 224)  # (C, H, W)
    mean: tuple[float, ...] = INCEPTION_MEAN
    std: tuple[float, ...] = INCEPTION_STD
    interpolation: str = "bicubic"
    crop_pct: float = 0.9
    crop_mode: str = "center"  # see CROP_MODES
    num_classes: int = 1000
    label_names: tuple[str, ...] | None = None
    # A named label list resolved when weights are loaded ("imagenet-1k"), so that registry
    # listings stay small; see `resolve_label_names`.
    label_set: str | None = None
    # Where the weights come from: "hf-hub:org/repo[@rev]", "timm:<name>", a path, or None.
    source: str | None = None
    tag: str | None = None
    license: str | None = None
    description: str = ""
    # ViTConfig fields these particular weights need beyond their architecture's (timm's hub
    # configs call them model_args): CLIP's LAION weights use exact GELU where the OpenAI weights of
    # the same architecture use QuickGELU. A registered source's model_args are applied when the
    # model is built for it; the user's own overrides still win.
    model_args: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # Patch-sequence (NaFlex) weights: the patch budget per image they were trained with
    # (transformers' max_num_patches), the default of their preprocessing; None: fixed-size input.
    max_patches: int | None = None

    def replace(self, **changes: Any) -> PretrainedCfg:
        return dataclasses.replace(self, **changes)

    def without_weights(self) -> PretrainedCfg:
        """A release's preprocessing, for the same architecture built without its weights (no
        source, tag, licence or labels)."""
        return PretrainedCfg(
            input_size=self.input_size,
            mean=self.mean,
            std=self.std,
            interpolation=self.interpolation,
            crop_pct=self.crop_pct,
            crop_mode=self.crop_mode,
            num_classes=self.num_classes,
            max_patches=self.max_patches,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PretrainedCfg:
        """A cfg from plain (JSON) data, checked: TypeError / ValueError name the bad field.
        Unknown keys are ignored (timm's configs carry many more)."""
        return cls(**check_pretrained_fields(data))

    def validate(self) -> None:
        """Raise TypeError / ValueError naming the first field that is not what it should be."""
        check_pretrained_fields(dataclasses.asdict(self))

    # Read-only dict behaviour over the fields, as timm's data helpers read a model's pretrained_cfg
    # (a dict in timm): timm.data.resolve_model_data_config(model), `cfg["input_size"]`,
    # `cfg.get("crop_pct")`, `dict(cfg)`. The architecture's keys (first_conv, classifier,
    # fixed_input_size) are in the model's `default_cfg`, timm's whole dict.
    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default) if key in self.__dataclass_fields__ else default

    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.__dataclass_fields__

    def keys(self) -> list[str]:
        return list(self.__dataclass_fields__)

    def items(self) -> list[tuple[str, Any]]:
        return [(key, getattr(self, key)) for key in self.__dataclass_fields__]

    def __iter__(self) -> Iterator[str]:
        return iter(self.__dataclass_fields__)

    def __len__(self) -> int:
        return len(self.__dataclass_fields__)


@functools.cache
def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(PretrainedCfg)


def check_pretrained_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The PretrainedCfg fields among `data` (a whole cfg or the part a file states), lists made
    tuples, each checked; raises TypeError (wrong type) or ValueError (wrong value) naming the field.

    mean and std need not have one entry per channel of input_size: a model adapted to other
    channels keeps its source's statistics, and InputSpec.from_model fits them to its channels."""
    names = {f.name for f in dataclasses.fields(PretrainedCfg)}
    values = {k: v for k, v in data.items() if k in names}
    for key in _SEQUENCES:
        if isinstance(values.get(key), list):
            values[key] = tuple(values[key])
    check_types(values, _field_types())
    problems = []
    if "input_size" in values:
        size = values["input_size"]
        ok = all(v > 0 for v in size) and max(size[1:]) <= MAX_IMAGE_SIDE
        problems.append((ok, "input_size", f"(channels, height, width), positive, sides at most {MAX_IMAGE_SIDE}"))
    for key in ("mean", "std"):
        if key in values:
            ok = len(values[key]) > 0 and (key == "mean" or all(v > 0 for v in values[key]))
            problems.append((ok, key, "a non-empty list of numbers" + (", all positive" if key == "std" else "")))
    if "mean" in values and "std" in values and len(values["mean"]) != len(values["std"]):
        problems.append((False, "std", f"as many numbers as mean {values['mean']!r}"))
    if "interpolation" in values:
        ok = values["interpolation"] in INTERPOLATIONS
        problems.append((ok, "interpolation", "one of " + ", ".join(map(repr, INTERPOLATIONS))))
    if "crop_mode" in values:
        ok = values["crop_mode"] in CROP_MODES
        problems.append((ok, "crop_mode", "one of " + ", ".join(map(repr, CROP_MODES))))
    if "crop_pct" in values:
        problems.append((0 < values["crop_pct"] <= 1, "crop_pct", "a number in (0, 1]"))
    if "num_classes" in values:
        problems.append((values["num_classes"] >= 0, "num_classes", "an int >= 0"))
    if values.get("max_patches") is not None:
        ok = 0 < values["max_patches"] <= MAX_TOKENS
        problems.append((ok, "max_patches", f"None or a number of patches from 1 to {MAX_TOKENS}"))
    if values.get("label_names") is not None and "num_classes" in values:
        expected = f"one name per class: num_classes={values['num_classes']}, {len(values['label_names'])} names given"
        problems.append((len(values["label_names"]) == values["num_classes"], "label_names", expected))
    for ok, name, expected in problems:
        if not ok:
            raise ValueError(f"{name}={values[name]!r} is invalid; expected {expected}")
    return values


# Named label sets, by the class count of the checkpoints that use them. The names come from
# maintained libraries: torchvision's ImageNet-1k categories (a dependency), timm's ImageNetInfo
# for Google's 21,843-class ImageNet-21k (timm is optional: without it these names are None).
LABEL_SETS = {"imagenet-1k": 1000, "imagenet-21k": 21843}


def imagenet_label_set(num_classes: int) -> str | None:
    """The ImageNet label set of a classifier with `num_classes` outputs (timm, torchvision and
    Google checkpoints state none: their class count tells it), or None."""
    return next((name for name, n in LABEL_SETS.items() if n == num_classes), None)


def resolve_label_names(cfg: PretrainedCfg) -> tuple[str, ...] | None:
    """The cfg's label names, from `label_names` or the named `label_set`."""
    if cfg.label_names is not None:
        return cfg.label_names
    if cfg.label_set is None:
        return None
    if cfg.label_set not in LABEL_SETS:
        raise ValueError(f"unknown label_set {cfg.label_set!r}; known: {', '.join(map(repr, LABEL_SETS))}")
    return _label_set_names(cfg.label_set)


@functools.cache
def _label_set_names(name: str) -> tuple[str, ...] | None:
    if name == "imagenet-1k":
        from torchvision.models import ResNet50_Weights  # any of its ImageNet-1k weights names the same classes

        return tuple(ResNet50_Weights.DEFAULT.meta["categories"])
    try:
        from timm.data import ImageNetInfo
    except ImportError:  # timm is optional; the weights work without names
        return None
    # Google's ImageNet-21k ("fall11" plus two classes), as timm names its 21843-class heads.
    return tuple(ImageNetInfo("imagenet-21k-goog").label_descriptions())


# Models carry their PretrainedCfg as a plain attribute, `model.pretrained_cfg`. Builders may return
# any nn.Module (plugins), whose `__getattr__` is typed `Tensor | Module`: these two helpers are the
# typed way to read and write the attribute on a module of unknown class.
_ATTR = "pretrained_cfg"


def pretrained_cfg_of(model: object) -> PretrainedCfg | None:
    """`model.pretrained_cfg` if the model carries a PretrainedCfg there, else None."""
    cfg = getattr(model, _ATTR, None)
    return cfg if isinstance(cfg, PretrainedCfg) else None


def attach_pretrained_cfg(model: object, cfg: PretrainedCfg) -> None:
    """Set `model.pretrained_cfg = cfg` on any model (a plain attribute: nn.Module stores it as is)."""
    setattr(model, _ATTR, cfg)
