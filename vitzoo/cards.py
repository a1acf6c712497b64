"""The card of a release: what someone choosing among the zoo's hundreds of names asks of each one —
how accurate, how big, how much compute, may it ship, where it comes from, what it pools — as
plain data (`card`), for `vitzoo info`, `vitzoo list --columns ... --sort ...` and `model_info`.

Every field comes from a source, or it is absent (and `not_stated` says why); nothing is guessed:
- accuracy: timm's published results (results-imagenet.csv and its siblings, read at one timm
  commit into vitzoo/zoo/timm_results.py by tools/cards_from_timm_results.py), for a release that
  classifies into ImageNet-1k's classes and has timm's name, at the row evaluated at its input size;
- parameters and GFLOPs: arithmetic on the release's ViTConfig (`ViTConfig.num_params`,
  `flops.vit_flops` at its input size), the same figures `vitzoo list` shows; a builder entry
  without a config has neither here;
- licence, commercial use, gated: the release's stated licence through vitzoo/licenses.py's table
  (gated only for an id the table holds: the table is what knows);
- origin: the registry entry (built-in, plugin, user code), its description and the source's;
- pooling: the config's `global_pool`, and for a family whose authors pool otherwise (DINOv3: timm
  averages the patch tokens, its authors take the class token) theirs and how to ask for it.
The weights' size as stored is not in the zoo's tables: the Hub states it, asked on request
(`vitzoo info NAME --weights-size`, vitzoo.weights_size: vitzoo/weights/hub_sizes.py).

This module reads a resolved name (the registry's `Resolved`, by its attributes), never the registry
itself, so that the registry's `model_info` can include the card without an import cycle.
"""

from __future__ import annotations

from typing import Any, Protocol

from .flops import vit_flops
from .licenses import LICENSES, commercial_use, license_flags
from .model import ViTConfig
from .pretrained_cfg import PretrainedCfg
from .zoo import timm_release_name, timm_results

__all__ = ["CARD_FIELDS", "DATASETS", "POOLS", "card"]

# What each of timm's results files measures (its results/README.md): data set -> words.
DATASETS: dict[str, str] = {
    "imagenet": "ImageNet-1k validation, 50,000 images",
    "imagenet-real": "ImageNet-1k validation with the ReaL labels (Beyer et al. 2020)",
    "imagenetv2": "ImageNetV2 matched frequency, 10,000 new images",
    "sketch": "ImageNet-Sketch, 50,000 drawings of the 1,000 classes",
    "imagenet-r": "ImageNet-R, 30,000 renditions of 200 classes (scored over those 200)",
    "imagenet-a": "ImageNet-A, 7,500 natural adversarial images of 200 classes (scored over those 200)",
}
# What a config's `global_pool` makes of the final tokens (after the final norm where it has one).
POOLS: dict[str, str] = {
    "token": "the class token",
    "avg": "the mean of the patch tokens",
    "prefix_avg": "the mean of the class and register tokens (Pixio's class tokens)",
    "map": "attention pooling: a learned query over the tokens",
    "coca": "CoCa's attentional pooler",
    "aimv2": "AIMv2's attention-pooling head: a learned query over the tokens, no MLP",
    "": "no pooling: every token",
}
# The families whose authors pool otherwise than the registered names (timm's weights and default):
# family -> (their global_pool, what it is).
AUTHORS_POOL: dict[str, tuple[str, str]] = {
    "dinov3": (
        "token",
        "the class token after the final norm: DINOv3's own global embedding, transformers' "
        "DINOv3ViTModel pooler_output",
    ),
}
# The card's fields, in the order `vitzoo info` shows them; any of them may be absent.
CARD_FIELDS = (
    "name",
    "timm_name",
    "source",
    "family",
    "origin",
    "description",
    "about",
    "num_classes",
    "input_size",
    "num_params",
    "gflops",
    "weights_size",
    "top1",
    "top5",
    "accuracy",
    "license",
    "commercial_use",
    "license_flags",
    "gated",
    "pooling",
    "not_stated",
)
IMAGENET_CLASSES = 1000
# The zoo's tables hold no file sizes; the Hub (or the local cache) states them when asked.
WEIGHTS_SIZE_WHY = "not asked: `vitzoo info NAME --weights-size` (vitzoo.weights_size) asks the Hub or the local cache"


class _Entry(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def origin(self) -> str: ...
    @property
    def description(self) -> str: ...


class Release(Protocol):
    """What `card` reads of a resolved name: the registry's `Resolved` has these attributes."""

    @property
    def name(self) -> str: ...
    @property
    def entry(self) -> _Entry: ...
    @property
    def pretrained_cfg(self) -> PretrainedCfg | None: ...
    @property
    def config(self) -> ViTConfig | None: ...


def card(release: Release) -> dict[str, Any]:
    """The card of a resolved name (`registry.resolve(name)`): its release's, the default one's for a
    name without a tag, else the architecture's alone. Plain data, JSON-ready; nothing is built."""
    cfg, config, entry = release.pretrained_cfg, release.config, release.entry
    name = f"{entry.name}.{cfg.tag}" if cfg is not None and cfg.tag else release.name  # the release described
    found: dict[str, Any] = {"name": name, "family": entry.family, "origin": entry.origin}
    not_stated: dict[str, str] = {"weights_size": WEIGHTS_SIZE_WHY}
    timm_name = timm_release_name(cfg) if cfg is not None else None
    if cfg is not None:
        found.update(timm_name=timm_name, source=cfg.source, about=cfg.description or None)
        found.update(num_classes=cfg.num_classes, input_size=list(cfg.input_size))
    found["description"] = entry.description or None
    if config is not None:
        found.setdefault("input_size", [config.in_chans, *_pair(config.img_size)])
        found.update(num_classes=config.num_classes, num_params=config.num_params)
        found["gflops"] = vit_flops(_at_size(config, found["input_size"])).total / 1e9
        found["pooling"] = _pooling(name, entry.family, config)
    else:
        not_stated["num_params"] = not_stated["gflops"] = "a builder entry: no ViTConfig to count from"
    accuracy, why = _accuracy(timm_name, found.get("num_classes"), found.get("input_size"))
    if accuracy is not None:
        found.update(top1=accuracy["imagenet"]["top1"], top5=accuracy["imagenet"]["top5"], accuracy=accuracy)
    else:
        not_stated["top1"] = not_stated["top5"] = why
    found.update(_licence(cfg.license if cfg is not None else None, not_stated))
    found["not_stated"] = not_stated
    return {key: found[key] for key in CARD_FIELDS if found.get(key) is not None}


def _pair(size: int | tuple[int, int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (size[0], size[1])


def _at_size(config: ViTConfig, input_size: list[int]) -> ViTConfig:
    """The config whose FLOPs are the release's: at its input size where the model takes any size
    (its table's grid may be another: timm's NaFlexVit), else as built."""
    size = (input_size[1], input_size[2])
    return config.replace(img_size=size) if config.dynamic_img_size and _pair(config.img_size) != size else config


def _accuracy(
    timm_name: str | None, num_classes: int | None, input_size: list[int] | None
) -> tuple[dict[str, Any] | None, str]:
    """timm's published results of the release (the row at its input size), or None and why not."""
    if num_classes != IMAGENET_CLASSES:
        return None, "not an ImageNet-1k classifier: timm's results score only those"
    rows = timm_results.RESULTS.get(timm_name or "")
    if not rows:
        return None, "timm publishes no results for this release"
    side = input_size[1] if input_size and input_size[1] == input_size[2] else None
    row = next((r for r in rows if r[0] == side), None)
    if row is None:
        sizes = ", ".join(str(r[0]) for r in rows)
        return None, f"timm's results evaluate it at {sizes} px, not at its input size"
    img_size, crop_pct, interpolation, *scores = row
    accuracy: dict[str, Any] = {
        "timm_name": timm_name,
        "timm_commit": timm_results.TIMM_COMMIT,
        "timm_commit_date": timm_results.TIMM_COMMIT_DATE,
        "img_size": img_size,
        "crop_pct": crop_pct,
        "interpolation": interpolation,
    }
    for (dataset, file), score in zip(timm_results.FILES.items(), scores, strict=True):
        if score is not None:
            accuracy[dataset] = {"file": file, "top1": score[0], "top5": score[1], "what": DATASETS[dataset]}
    if "imagenet" not in accuracy:
        return None, f"timm's {timm_results.FILES['imagenet']} has no row for it"
    return accuracy, ""


def _licence(license: str | None, not_stated: dict[str, str]) -> dict[str, Any]:
    """The licence, whether it allows commercial use, its flags, and whether the Hub gates it (only
    where the licence table holds the id; else `not_stated` says so)."""
    if license is None:
        not_stated["license"] = "the source states no licence"
        return {}
    row = LICENSES.get(license.strip().lower())
    if row is None:
        not_stated["gated"] = f"the licence table does not hold {license!r}"
    return {
        "license": license,
        "commercial_use": commercial_use(license),
        "license_flags": list(license_flags(license)),
        "gated": row.gated if row is not None else None,
    }


def _pooling(name: str, family: str, config: ViTConfig) -> dict[str, Any]:
    """What the model's pooled output is, and where its family's authors pool otherwise, theirs and
    the argument that gives it."""
    pooling: dict[str, Any] = {"global_pool": config.global_pool, "computes": POOLS.get(config.global_pool, "")}
    authors = AUTHORS_POOL.get(family)
    if authors is not None:
        pool, what = authors
        pooling.update(authors=pool, authors_computes=what)
        if pool != config.global_pool:
            pooling["ask"] = f"vitzoo.create({name!r}, pretrained=True, global_pool={pool!r})"
    return pooling
