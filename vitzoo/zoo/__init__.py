"""The built-in named models, as data: `MODELS`, read by the registry (vitzoo/registry/table.py) on first use.

Three tables make it:
- `curated.py`, written by hand: the MNIST models, and each family's first releases with their
  descriptions and the choices timm's table does not state (vitzoo's names, DINOv3's class-token
  option, SigLIP 2's sizes as tags, the NaFlex towers of transformers' layout);
- `timm_releases.py`, generated from timm by tools/zoo_from_timm.py: every other ViT-family release
  on timm's hub that ViTConfig expresses, one line of data each (architecture, tag, classes, size,
  normalisation, crop, interpolation, licence), its architecture's fields stated once per family;
- `open_clip_releases.py`, generated from open_clip by tools/zoo_from_open_clip.py: every other
  open_clip release whose image tower ViTConfig expresses (repository, normalisation, size,
  interpolation, resize mode, licence), with the vitzoo "name.tag" the generator joined it to.

A generated release of an architecture that a curated model already has joins that model as one
more tag (its `model_args` say what it needs beyond the model's config: a class count, a size, an
activation); the other architectures become models of their own, named by `short_name`'s rule. An open_clip
release joins the model the generator names (one of equal config, or a new one named from open_clip's
model), its `model_args` again what its tower has beyond that model's config.
Loading a source is vitzoo.weights' job: this package imports only the model config and `PretrainedCfg`.
`timm_results.py`, generated from timm's results/ folder by tools/cards_from_timm_results.py, is no
part of `MODELS`: it holds timm's published ImageNet accuracy of the timm releases, which the cards
read (vitzoo/cards.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..model import ViTConfig
from ..pretrained_cfg import (
    CLIP_MEAN,
    CLIP_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    INCEPTION_MEAN,
    INCEPTION_STD,
    PretrainedCfg,
    imagenet_label_set,
)
from .curated import CURATED, REFUSED_RELEASES, ZooModel
from .families import family_of
from .open_clip_releases import ARCHITECTURES as _OPEN_CLIP_ARCHS
from .open_clip_releases import RELEASES as _OPEN_CLIP_RELEASES
from .timm_archs import arch_config, as_tuples
from .timm_releases import ARCHITECTURES, RELEASES
from .timm_releases import OPEN_CLIP_NAMES as _OPEN_CLIP_TIMM

TIMM_HUB = "hf-hub:timm/"

__all__ = [
    "MODELS",
    "OPEN_CLIP_NAMES",
    "REFUSED_RELEASES",
    "TIMM_HUB",
    "ZooModel",
    "arch_config",
    "open_clip_config",
    "timm_release_name",
]

# The normalisations of the generated table, by name; a row may also give (mean, std) itself.
NORMS = {
    "imagenet": (IMAGENET_MEAN, IMAGENET_STD),
    "inception": (INCEPTION_MEAN, INCEPTION_STD),
    "clip": (CLIP_MEAN, CLIP_STD),
}


def _norm_and_size(norm: Any, size: Any) -> tuple[Any, Any, int, int]:
    """A row's normalisation (a NORMS name or (mean, std)) and input size (a side or (height, width))."""
    mean, std = NORMS[norm] if isinstance(norm, str) else as_tuples(norm)
    height, width = (size, size) if isinstance(size, int) else as_tuples(size)
    return mean, std, height, width


def _release(row: tuple[Any, ...], config: ViTConfig) -> PretrainedCfg:
    """One generated row as the source of a model of `config`: `model_args` hold what its
    architecture (timm's, at the row's classes and size) has beyond `config`."""
    arch, tag, classes, size, norm, crop_pct, crop_mode, interpolation, licence, *repo = row
    mean, std, height, width = _norm_and_size(norm, size)
    wanted = arch_config(arch).replace(num_classes=classes)
    if not wanted.dynamic_img_size:  # a dynamic model's table keeps its own grid (C-RADIO NaFlexVit: 128 x 128)
        wanted = wanted.replace(img_size=as_tuples(size))
    return PretrainedCfg(
        source=f"hf-hub:{repo[0] if repo else f'timm/{arch}.{tag}'}",
        input_size=(3, height, width),
        mean=mean,
        std=std,
        interpolation=interpolation,
        crop_pct=crop_pct,
        crop_mode=crop_mode,
        num_classes=classes,
        label_set=imagenet_label_set(classes),
        license=licence or None,
        description=f"timm's release {arch}.{tag}",
        extra={"timm": f"{arch}.{tag}"},  # its name in timm (the source may be another copy of the weights)
        model_args=_model_args(wanted, config),
        tag=tag,
    )


def _model_args(wanted: ViTConfig, config: ViTConfig) -> dict[str, Any]:
    """The fields a release's architecture `wanted` has beyond its model's `config`."""
    want, have = wanted.to_dict(), config.to_dict()
    for name in ("init_values", "postnorm_init"):  # LayerScale's, post-norm's initial value: the weights replace it
        if want[name] is not None and have[name] is not None:
            want[name] = have[name]
    return {k: as_tuples(v) for k, v in want.items() if as_tuples(v) != as_tuples(have[k])}


def open_clip_config(model: str) -> ViTConfig:
    """The ViTConfig of a generated open_clip model's image tower."""
    return ViTConfig(**{k: as_tuples(v) for k, v in _OPEN_CLIP_ARCHS[model].items()})


def _open_clip_release(row: tuple[Any, ...], config: ViTConfig, tag: str) -> PretrainedCfg:
    """One generated open_clip row as the source of a model of `config`, under `tag`."""
    model, oc_tag, repo, norm, size, interpolation, resize_mode, licence, _ = row
    mean, std, height, width = _norm_and_size(norm, size)
    wanted = open_clip_config(model)
    return PretrainedCfg(
        source=f"hf-hub:{repo}",
        input_size=(3, height, width),
        mean=mean,
        std=std,
        interpolation=interpolation,
        crop_pct=1.0,  # open_clip resizes to the input size, then crops the centre or squashes
        crop_mode="center" if resize_mode == "shortest" else "squash",
        num_classes=wanted.num_classes,
        license=licence,
        description=f"open_clip's release {model}.{oc_tag}",
        extra={"open_clip": f"{model}.{oc_tag}"},
        model_args=_model_args(wanted, config),
        tag=tag,
    )


def _with_open_clip(models: tuple[ZooModel, ...]) -> tuple[ZooModel, ...]:
    """`models` with each generated open_clip release added to the model it names: a tag of an
    existing model, or of a new model (the first release's tower, named by the generator)."""
    by_name = {model.name: model for model in models}
    for row in _OPEN_CLIP_RELEASES:
        name, _, tag = row[-1].partition(".")
        model = by_name.get(name)
        if model is None:
            config = open_clip_config(row[0])
            first = _open_clip_release(row, config, tag)
            what = f"open_clip's {row[0]} image tower"
            model = ZooModel(name, config, first.without_weights(), {}, what, family=family_of(name))
        release = _open_clip_release(row, model.config, tag)
        by_name[name] = replace(model, pretrained={**model.pretrained, tag: release})
    return tuple(by_name.values())


def _joined() -> tuple[ZooModel, ...]:
    """The curated models with the generated releases of their architectures as more tags, then a
    model for each other generated architecture, in the table's order."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for row in RELEASES:
        rows.setdefault(row[0], []).append(row)
    curated_arch: dict[str | None, str] = {}
    for model in CURATED:
        curated_arch.setdefault(model.timm_name, model.name)
    models = []
    for model in CURATED:
        extra = rows.pop(model.timm_name or "", []) if curated_arch.get(model.timm_name) == model.name else []
        tags = {**model.pretrained, **{r[1]: _release(r, model.config) for r in extra if r[1] not in model.pretrained}}
        models.append(replace(model, pretrained=tags, family=model.family or family_of(model.name, model.timm_name)))
    for arch, arch_rows in rows.items():
        name, fam, _ = ARCHITECTURES[arch]
        config = arch_config(arch)
        tags = {r[1]: _release(r, config) for r in arch_rows}
        default = next(iter(tags.values())).without_weights()
        what = f"same shapes as timm's {arch}"
        models.append(ZooModel(name, config, default, tags, f"{fam}: {what}", timm_name=arch, family=fam))
    return tuple(models)


def timm_release_name(cfg: PretrainedCfg) -> str | None:
    """timm's "arch.tag" of a release: the one the table states (`extra["timm"]`: the weights may be
    another copy, e.g. a QuickGELU architecture's), else that of its timm hub repository."""
    stated = cfg.extra.get("timm")
    if isinstance(stated, str):
        return stated
    if "open_clip" in cfg.extra:
        return None  # open_clip's release: a repository timm named holds open_clip's files, no timm release
    source = cfg.source or ""
    name = source[len(TIMM_HUB) :] if source.startswith(TIMM_HUB) else ""
    return name if "." in name and not any(ch in name for ch in "/@") else None


def _open_clip_names(models: tuple[ZooModel, ...]) -> dict[str, str]:
    """open_clip's "MODEL.PRETRAINED" -> vitzoo's "name.tag": the timm-hosted releases through their
    timm names, then the generated open_clip table's releases."""
    by_timm: dict[str, str] = {}
    for model in models:
        for tag, cfg in model.pretrained.items():
            timm_name = timm_release_name(cfg)
            if timm_name is not None:
                by_timm.setdefault(timm_name, f"{model.name}.{tag}")
    timm_hosted = {name: by_timm[timm_name] for name, timm_name in _OPEN_CLIP_TIMM.items()}
    own = {f"{row[0]}.{row[1]}": row[-1] for row in _OPEN_CLIP_RELEASES}
    return {**timm_hosted, **own}


# The curated and timm tables joined: the models open_clip's generator joins its releases to.
CURATED_AND_TIMM: tuple[ZooModel, ...] = _joined()
MODELS: tuple[ZooModel, ...] = _with_open_clip(CURATED_AND_TIMM)
OPEN_CLIP_NAMES: dict[str, str] = _open_clip_names(MODELS)
