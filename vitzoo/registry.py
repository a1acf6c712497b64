"""The model registry: names -> builders, plus the pretrained sources each name knows.

    vitzoo.create("vit_b16", num_classes=10)          # build, overriding config fields
    vitzoo.list_models("deit_*")                       # shell-style patterns
    vitzoo.model_info("vit_b16")                       # config, parameter count, sources
    vitzoo.register("vit_s8_deep", base="vit_s16", patch_size=8, depth=16)   # a config variant

    @vitzoo.register_model                             # a builder function
    def my_vit(**overrides) -> VisionTransformer: ...

Names may carry a pretrained tag after a dot: "vit_b16.augreg_in21k_ft_in1k".
Third-party packages add models through the entry-point group "vitzoo.models" (see plugins).
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from .model import ViTConfig, VisionTransformer
from .weights.pretrained_cfg import PretrainedCfg

Builder = Callable[..., nn.Module]


class UnknownModelError(LookupError):
    """An unknown model name or pretrained tag; the message suggests the closest names."""


class RegistryError(ValueError):
    """A registration that clashes with an existing one."""


@dataclass
class ModelEntry:
    name: str
    builder: Builder
    config: ViTConfig | None = None  # set for config variants; builder entries build on "meta" to find it
    pretrained: dict[str, PretrainedCfg] = field(default_factory=dict)  # tag -> cfg, first is default
    default_cfg: PretrainedCfg | None = None  # preprocessing without weights
    origin: str = "user code"  # "built-in", "plugin (<distribution>)" or "user code"
    description: str = ""

    @property
    def default_tag(self) -> str | None:
        return next(iter(self.pretrained), None)

    def resolve_config(self, **overrides: Any) -> ViTConfig:
        if self.config is not None:
            return self.config.replace(**overrides)
        with torch.device("meta"):
            model = self.builder(**overrides)
        return model.config


_REGISTRY: dict[str, ModelEntry] = {}
# The origin given to entries registered while a plugin or the built-in zoo is being imported.
_current_origin: list[str] = ["user code"]


def _add(entry: ModelEntry, override: bool) -> ModelEntry:
    if entry.name in _REGISTRY and not override:
        old = _REGISTRY[entry.name]
        raise RegistryError(
            f"model name {entry.name!r} is already registered (origin: {old.origin}); "
            f"the new registration (origin: {entry.origin}) clashes with it — pick another name "
            "or pass override=True"
        )
    if not entry.name or "." in entry.name or not entry.name.isprintable():
        raise RegistryError(f"model name {entry.name!r} is invalid: expected a non-empty name without '.'")
    _REGISTRY[entry.name] = entry
    return entry


def _to_pretrained_dict(pretrained: dict[str, PretrainedCfg] | None) -> dict[str, PretrainedCfg]:
    result: dict[str, PretrainedCfg] = {}
    for tag, cfg in (pretrained or {}).items():
        if not isinstance(cfg, PretrainedCfg):
            raise TypeError(f"pretrained[{tag!r}] must be a PretrainedCfg, got {type(cfg).__name__}")
        result[tag] = cfg if cfg.tag == tag else cfg.replace(tag=tag)
    return result


def register_model(
    fn: Builder | None = None,
    *,
    name: str | None = None,
    pretrained: dict[str, PretrainedCfg] | None = None,
    default_cfg: PretrainedCfg | None = None,
    override: bool = False,
) -> Any:
    """Decorator registering a builder `fn(**overrides) -> nn.Module` under its name."""

    def decorate(builder: Builder) -> Builder:
        _discover_plugins()  # as in `register`: user code comes after the built-ins and plugins
        entry = ModelEntry(
            name=name or builder.__name__,
            builder=builder,
            pretrained=_to_pretrained_dict(pretrained),
            default_cfg=default_cfg,
            origin=_current_origin[-1],
            description=inspect.getdoc(builder) or "",
        )
        _add(entry, override)
        return builder

    return decorate(fn) if fn is not None else decorate


def register(
    name: str,
    *,
    base: str | ViTConfig | None = None,
    pretrained: dict[str, PretrainedCfg] | None = None,
    default_cfg: PretrainedCfg | None = None,
    override: bool = False,
    description: str = "",
    **fields: Any,
) -> ModelEntry:
    """Register a config variant: `base` (a registered name or a ViTConfig) with `fields` changed.

    A variant of a registered name inherits its preprocessing (default_cfg) unless given one; it
    inherits no pretrained weights unless `pretrained` says where they are."""
    _discover_plugins()
    base_cfg_pre: PretrainedCfg | None = None
    if base is None:
        base_config = ViTConfig()
    elif isinstance(base, ViTConfig):
        base_config = base
    else:
        base_entry = get_entry(base)
        base_config = base_entry.resolve_config()
        base_cfg_pre = base_entry.default_cfg
    config = base_config.replace(**fields)

    def build(**overrides: Any) -> VisionTransformer:
        return VisionTransformer(config.replace(**overrides))

    entry = ModelEntry(
        name=name,
        builder=build,
        config=config,
        pretrained=_to_pretrained_dict(pretrained),
        default_cfg=default_cfg or base_cfg_pre,
        origin=_current_origin[-1],
        description=description,
    )
    return _add(entry, override)


def split_name(name: str) -> tuple[str, str | None]:
    """"vit_b16.augreg_in1k" -> ("vit_b16", "augreg_in1k"); "vit_b16" -> ("vit_b16", None)."""
    base, _, tag = name.partition(".")
    return base, (tag or None)


def get_entry(name: str) -> ModelEntry:
    _discover_plugins()
    base, _ = split_name(name)
    if base not in _REGISTRY:
        close = difflib.get_close_matches(base, list(_REGISTRY), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnknownModelError(f"unknown model {base!r}{hint} (vitzoo.list_models() shows all names)")
    return _REGISTRY[base]


def get_pretrained_cfg(name: str) -> tuple[ModelEntry, PretrainedCfg | None]:
    """The entry for `name` and the pretrained source its tag (or the default) selects."""
    entry = get_entry(name)
    _, tag = split_name(name)
    if tag is None:
        return entry, (entry.pretrained[entry.default_tag] if entry.default_tag else None)
    if tag not in entry.pretrained:
        known = ", ".join(f"{entry.name}.{t}" for t in entry.pretrained) or "none"
        raise UnknownModelError(f"model {entry.name!r} has no pretrained tag {tag!r}; known: {known}")
    return entry, entry.pretrained[tag]


def create(name: str, pretrained: bool = False, weights: Any = None, **overrides: Any) -> nn.Module:
    """Build a registered model; `overrides` replace config fields (num_classes, img_size, ...).

    pretrained=True loads the name's default source (or the one its ".tag" selects);
    weights=SOURCE loads a file, directory, "hf-hub:org/repo" or "timm:<name>" instead."""
    entry, pcfg = get_pretrained_cfg(name)
    _, tag = split_name(name)
    if tag is not None and not pretrained and weights is None:
        pretrained = True  # naming a weights tag means asking for those weights
    if pretrained or weights is not None:
        from . import weights as weights_mod

        if not hasattr(weights_mod, "create_pretrained"):
            raise NotImplementedError("pretrained weights are not available in this build of vitzoo")
        return weights_mod.create_pretrained(entry, pcfg, weights=weights, pretrained=pretrained, **overrides)
    model = entry.builder(**overrides)
    if entry.default_cfg is not None and hasattr(model, "pretrained_cfg"):
        model.pretrained_cfg = _fit_cfg(entry.default_cfg, model)
    return model


def _fit_cfg(cfg: PretrainedCfg, model: nn.Module) -> PretrainedCfg:
    """The entry's preprocessing, with input size and class count of the model actually built."""
    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        return cfg
    from .layers import to_2tuple

    size = (config.in_chans, *to_2tuple(config.img_size))
    labels = cfg.label_names if config.num_classes == cfg.num_classes else None
    return cfg.replace(input_size=size, num_classes=config.num_classes, label_names=labels)


def list_models(pattern: str | list[str] = "*", pretrained: bool | None = None, exclude: str | list[str] = ()) -> list[str]:
    """Registered names matching shell-style `pattern`(s). pretrained=True lists "name.tag"
    for every pretrained source; pretrained=False lists only names without any source."""
    _discover_plugins()
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    excludes = [exclude] if isinstance(exclude, str) else list(exclude)
    names: list[str] = []
    for entry in _REGISTRY.values():
        if pretrained is True:
            candidates = [f"{entry.name}.{tag}" for tag in entry.pretrained]
        elif pretrained is False:
            candidates = [] if entry.pretrained else [entry.name]
        else:
            candidates = [entry.name]
        for cand in candidates:
            base = split_name(cand)[0]
            if any(fnmatch.fnmatchcase(cand, p) or fnmatch.fnmatchcase(base, p) for p in patterns) and not any(
                fnmatch.fnmatchcase(cand, e) for e in excludes
            ):
                names.append(cand)
    return sorted(names)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def model_info(name: str) -> dict[str, Any]:
    """Config, parameter count, pretrained sources and origin of a registered model (plain data).
    Nothing is allocated: the model is built on the meta device to count its parameters."""
    entry, pcfg = get_pretrained_cfg(name)
    with torch.device("meta"):
        model = entry.builder()
    config = getattr(model, "config", None)
    return {
        "name": entry.name,
        "origin": entry.origin,
        "description": entry.description,
        "config": config.to_dict() if isinstance(config, ViTConfig) else None,
        "num_params": count_parameters(model),
        "default_pretrained": pcfg.tag if pcfg else None,
        "pretrained": {tag: cfg.to_dict() for tag, cfg in entry.pretrained.items()},
        "preprocessing": (pcfg or entry.default_cfg or getattr(model, "pretrained_cfg", PretrainedCfg())).to_dict(),
    }


def _discover_plugins() -> None:
    """Import the built-in zoo once, then third-party entry points once (vitzoo/plugins.py)."""
    from . import zoo  # noqa: F401  (registers the built-in models on first import)

    if len(_current_origin) > 1:
        return  # the built-in zoo or a plugin is being imported: plugins come after it is complete
    from . import plugins

    plugins.discover()
