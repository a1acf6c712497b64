"""The model registry: names -> builders, plus what each name knows (config, pretrained sources,
preprocessing, origin, timm counterpart). Plain data and the operations on it; building a model
with weights is vitzoo/builder.py's job.

    vitzoo.list_models("deit_*")                       # shell-style patterns
    vitzoo.model_info("vit_b16")                       # config, parameter count, sources
    vitzoo.register("vit_s8_deep", base="vit_s16", patch_size=8, depth=16)   # a config variant

    @vitzoo.register_model                             # a builder function
    def my_vit(**overrides) -> VisionTransformer: ...

Names may carry a pretrained tag after a dot: "vit_b16.augreg_in21k_ft_in1k".

On first use the registry fills itself: the built-in table (vitzoo/zoo.py), then third-party
entry points (vitzoo/plugins.py). Every operation is thread-safe: one re-entrant lock guards the
table, and while one thread loads plugins, the others wait until the zoo is complete. The origin
recorded for new entries ("user code", "built-in", "plugin (<dist>)") is per thread.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import plugins, zoo
from .model import VisionTransformer, ViTConfig, fit_pretrained_cfg, timm_default_cfg
from .pretrained_cfg import PretrainedCfg, pretrained_cfg_of

Builder = Callable[..., nn.Module]
USER_ORIGIN = "user code"


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
    origin: str = USER_ORIGIN  # "built-in", "plugin (<distribution>)" or "user code"
    description: str = ""
    timm_name: str | None = None  # timm's architecture with the same shapes and parameter names

    @property
    def default_tag(self) -> str | None:
        return next(iter(self.pretrained), None)

    def resolve_config(self, **overrides: Any) -> ViTConfig:
        if self.config is not None:
            return self.config.replace(**overrides)
        with torch.device("meta"):
            model = self.builder(**overrides)
        config = getattr(model, "config", None)
        if not isinstance(config, ViTConfig):
            raise TypeError(f"model {self.name!r} is built by {self.builder!r}, which returns no ViTConfig `config`")
        return config


_lock = threading.RLock()
_entries: dict[str, ModelEntry] = {}
_seeded = False
_thread = threading.local()  # .origins: this thread's stack of origins (see `origin`)


# ----------------------------------------------------------------------------- origins, snapshots
@contextmanager
def origin(label: str) -> Iterator[None]:
    """Entries registered by this thread inside the block get `label` as their origin (the plugin
    loader uses "plugin (<distribution>)"). Other threads keep their own origin."""
    stack = _origin_stack()
    stack.append(label)
    try:
        yield
    finally:
        stack.pop()


def current_origin() -> str:
    stack = _origin_stack()
    return stack[-1] if stack else USER_ORIGIN


def _origin_stack() -> list[str]:
    if not hasattr(_thread, "origins"):
        _thread.origins = []
    stack: list[str] = _thread.origins
    return stack


def snapshot() -> dict[str, ModelEntry]:
    """A copy of the table (name -> entry), for `restore`: tests and the plugin loader's rollback."""
    with _lock:
        return dict(_entries)


def restore(saved: dict[str, ModelEntry]) -> None:
    """Put the table back to a `snapshot`."""
    with _lock:
        _entries.clear()
        _entries.update(saved)


def unregister(name: str) -> ModelEntry:
    """Remove a registered name (and return its entry)."""
    _populate()
    with _lock:
        if name not in _entries:
            raise UnknownModelError(f"unknown model {name!r}: nothing to unregister")
        return _entries.pop(name)


# ----------------------------------------------------------------------------- registering
def _add(entry: ModelEntry, override: bool) -> ModelEntry:
    if not entry.name or "." in entry.name or not entry.name.isprintable():
        raise RegistryError(f"model name {entry.name!r} is invalid: expected a non-empty name without '.'")
    with _lock:
        plugins.check_registering()  # under the lock: a plugin abandoned after its timeout is refused
        if entry.name in _entries and not override:
            old = _entries[entry.name]
            raise RegistryError(
                f"model name {entry.name!r} is already registered (origin: {old.origin}); "
                f"the new registration (origin: {entry.origin}) clashes with it — pick another name "
                "or pass override=True"
            )
        _entries[entry.name] = entry
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
        _populate()  # as in `register`: user code comes after the built-ins and plugins
        entry = ModelEntry(
            name=name or builder.__name__,
            builder=builder,
            pretrained=_to_pretrained_dict(pretrained),
            default_cfg=default_cfg,
            origin=current_origin(),
            description=inspect.getdoc(builder) or "",
        )
        _add(entry, override)
        return builder

    return decorate(fn) if fn is not None else decorate


def _config_builder(config: ViTConfig) -> Builder:
    def build(**overrides: Any) -> VisionTransformer:
        return VisionTransformer(config.replace(**overrides))

    return build


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
    _populate()
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
    entry = ModelEntry(
        name=name,
        builder=_config_builder(config),
        config=config,
        pretrained=_to_pretrained_dict(pretrained),
        default_cfg=default_cfg or base_cfg_pre,
        origin=current_origin(),
        description=description,
    )
    return _add(entry, override)


# ----------------------------------------------------------------------------- looking up
def split_name(name: str) -> tuple[str, str | None]:
    """ "vit_b16.augreg_in1k" -> ("vit_b16", "augreg_in1k"); "vit_b16" -> ("vit_b16", None)."""
    base, _, tag = name.partition(".")
    return base, (tag or None)


def get_entry(name: str) -> ModelEntry:
    _populate()
    base, _ = split_name(name)
    with _lock:
        entry = _entries.get(base)
        if entry is None:
            close = difflib.get_close_matches(base, list(_entries), n=5, cutoff=0.5)
    if entry is None:
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnknownModelError(f"unknown model {base!r}{hint} (vitzoo.list_models() shows all names)")
    return entry


def wants_weights(name: str, pretrained: bool | None) -> bool:
    """Whether building `name` loads its weights: as `pretrained` says; when it says nothing (None),
    a ".tag" asks for that tag's weights. pretrained=False with a tag is timm's spelling of the
    architecture those weights need, randomly initialised."""
    return pretrained if pretrained is not None else split_name(name)[1] is not None


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


def find_by_timm_name(timm_name: str) -> ModelEntry | None:
    """The entry whose timm counterpart is `timm_name` (a timm architecture, without tag)."""
    _populate()
    with _lock:
        return next((e for e in _entries.values() if e.timm_name == timm_name), None)


def timm_counterparts() -> dict[str, str]:
    """{vitzoo name: timm architecture} for every entry that has a timm counterpart."""
    _populate()
    with _lock:
        return {e.name: e.timm_name for e in _entries.values() if e.timm_name}


def list_models(
    pattern: str | list[str] = "*",
    pretrained: bool | None = None,
    exclude: str | Sequence[str] = (),
    license: str | Sequence[str] | None = None,
) -> list[str]:
    """Registered names matching shell-style `pattern`(s). pretrained=True lists "name.tag"
    for every pretrained source; pretrained=False lists only names without any source.
    `license` (a Hub licence id such as "apache-2.0", or several; case-insensitive) keeps the
    sources under one of those licences: "name.tag" with pretrained=True, else the names that
    have at least one such source."""
    _populate()
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    excludes = [exclude] if isinstance(exclude, str) else list(exclude)
    licenses = _license_filter(license, pretrained)
    names: list[str] = []
    for entry in snapshot().values():
        tags = [t for t, cfg in entry.pretrained.items() if licenses is None or (cfg.license or "").lower() in licenses]
        if pretrained is True:
            candidates = [f"{entry.name}.{tag}" for tag in tags]
        elif pretrained is False:
            candidates = [] if entry.pretrained else [entry.name]
        else:
            candidates = [entry.name] if licenses is None or tags else []
        for cand in candidates:
            base = split_name(cand)[0]
            if any(fnmatch.fnmatchcase(cand, p) or fnmatch.fnmatchcase(base, p) for p in patterns) and not any(
                fnmatch.fnmatchcase(cand, e) for e in excludes
            ):
                names.append(cand)
    return sorted(names)


def _license_filter(license: str | Sequence[str] | None, pretrained: bool | None) -> set[str] | None:
    """The licence ids `list_models(license=...)` keeps, lower case; None keeps every source."""
    if license is None:
        return None
    wanted = [license] if isinstance(license, str) else list(license)
    if not wanted or not all(isinstance(x, str) and x.strip() for x in wanted):
        raise ValueError(f"list_models: license={license!r} is invalid; expected a licence id such as 'apache-2.0'")
    if pretrained is False:
        raise ValueError("list_models: license filters pretrained sources; pretrained=False lists names that have none")
    return {x.strip().lower() for x in wanted}


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_meta(name: str, **overrides: Any) -> nn.Module:
    """The registered model `name` built on the meta device, a tag's own fields (e.g. the
    activation its weights need) included: its shapes, parameter count and bytes, nothing allocated."""
    entry, pcfg = get_pretrained_cfg(name)
    with torch.device("meta"):
        return entry.builder(**{**(pcfg.model_args if pcfg else {}), **overrides})


def model_info(name: str) -> dict[str, Any]:
    """Config, parameter count, pretrained sources and origin of a registered model (plain data).
    Nothing is allocated: the model is built on the meta device to count its parameters.
    "preprocessing" is timm's whole pretrained cfg of the name (`timm_pretrained_cfg`)."""
    entry, pcfg = get_pretrained_cfg(name)
    model = build_meta(name)
    config = getattr(model, "config", None)
    vit_config = config if isinstance(config, ViTConfig) else None
    return {
        "name": entry.name,
        "origin": entry.origin,
        "description": entry.description,
        "timm_name": entry.timm_name,
        "config": config.to_dict() if isinstance(config, ViTConfig) else None,
        "num_params": count_parameters(model),
        "default_pretrained": pcfg.tag if pcfg else None,
        "pretrained": {tag: cfg.to_dict() for tag, cfg in entry.pretrained.items()},
        "preprocessing": _timm_cfg(entry, pcfg, vit_config, pretrained_cfg_of(model)),
    }


def timm_pretrained_cfg(name: str) -> dict[str, Any]:
    """timm's whole pretrained cfg of `name` ("name" or "name.tag"), one dict: the preprocessing of
    the source the tag (or the default tag) selects, or of the name without weights, and the keys
    timm derives from the architecture (fixed_input_size, first_conv, classifier: the
    architecture the tag builds). The same keys and values as the `default_cfg` of the model
    `create(name)` builds; nothing is built where the name is a config."""
    entry, pcfg = get_pretrained_cfg(name)
    model_args = pcfg.model_args if pcfg else {}
    if entry.config is not None:
        return _timm_cfg(entry, pcfg, entry.config.replace(**model_args), None)
    with torch.device("meta"):
        model = entry.builder(**model_args)
    config = getattr(model, "config", None)
    return _timm_cfg(entry, pcfg, config if isinstance(config, ViTConfig) else None, pretrained_cfg_of(model))


def get_pretrained_cfg_value(name: str, key: str) -> Any:
    """timm's `get_pretrained_cfg_value(model_name, cfg_key)` for a registered name, for code
    written for timm: the value of `key` in the name's pretrained cfg (`timm_pretrained_cfg`:
    the tag's, else the default tag's), None where the cfg has no such key (timm's
    min_input_size, hf_hub_id, ...). An unknown name or tag raises UnknownModelError."""
    return timm_pretrained_cfg(name).get(key)


def weightless_cfg(entry: ModelEntry, config: ViTConfig, named: PretrainedCfg | None = None) -> PretrainedCfg | None:
    """The preprocessing a model of `config` built under `entry`'s name carries without weights:
    that of the `named` source (a tag built untrained), else the entry's, fitted to the model
    (input size, class count); None where there is none."""
    cfg = named.without_weights() if named is not None else entry.default_cfg
    if cfg is None:
        return None
    fitted = fit_pretrained_cfg(cfg, config)
    own_table = entry.config is not None and config.img_size == entry.config.img_size
    if entry.pretrained and config.dynamic_img_size and own_table:
        # Any input size, at the table of the name's own releases: their evaluation size stays
        # (timm's NaFlexVit evaluates at a larger size than its table's grid).
        fitted = fitted.replace(input_size=(config.in_chans, *cfg.input_size[1:]))
    return fitted


def _timm_cfg(
    entry: ModelEntry, pcfg: PretrainedCfg | None, config: ViTConfig | None, own: PretrainedCfg | None
) -> dict[str, Any]:
    """timm's dict for a registered source `pcfg`, or for the entry built without weights (`own`:
    the cfg a non-config builder's model carries itself); `config` is the architecture."""
    if config is None:  # a plugin builder that makes no ViT: its cfg alone
        return (pcfg or entry.default_cfg or own or PretrainedCfg()).to_dict()
    cfg = pcfg or weightless_cfg(entry, config) or own or fit_pretrained_cfg(PretrainedCfg(), config)
    return timm_default_cfg(cfg, config)


def loaded_plugins() -> list[plugins.PluginRecord]:
    """One record per "vitzoo.models" entry point: what it registered, or why it failed."""
    try:
        _populate()
    except RegistryError:
        pass  # the records say what clashed
    return plugins.records()


# ----------------------------------------------------------------------------- filling the table
def _populate() -> None:
    """The built-in table once, then third-party entry points once (plugins.discover). Holding the
    lock throughout makes other threads wait for a complete zoo; the loading thread itself re-enters
    (a plugin's own `register` call) and finds discovery underway."""
    global _seeded
    with _lock:
        if not _seeded:
            for model in zoo.MODELS:
                _add(
                    ModelEntry(
                        name=model.name,
                        builder=_config_builder(model.config),
                        config=model.config,
                        pretrained=_to_pretrained_dict(model.pretrained),
                        default_cfg=model.default_cfg,
                        origin="built-in",
                        description=model.description,
                        timm_name=model.timm_name,
                    ),
                    override=False,
                )
            _seeded = True
        plugins.discover(_PLUGIN_ACCESS)


_PLUGIN_ACCESS = plugins.RegistryAccess(
    lock=_lock, origin=origin, snapshot=snapshot, restore=restore, clash_error=RegistryError
)
