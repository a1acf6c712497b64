"""The model registry: names -> builders, plus what each name knows (config, pretrained sources,
preprocessing, origin, timm counterpart). Plain data and the operations on it; building a model
with weights is vitzoo/builder.py's job.

    vitzoo.list_models("deit_*")                       # shell-style patterns
    vitzoo.model_info("vit_b16")                       # config, parameter count, sources
    vitzoo.register("vit_s8_deep", base="vit_s16", patch_size=8, depth=16)   # a config variant

    @vitzoo.register_model                             # a builder function
    def my_vit(**overrides) -> VisionTransformer: ...

Names may carry a pretrained tag after a dot: "vit_b16.augreg_in21k_ft_in1k". The libraries'
own spellings name the same entries (`resolve`): timm's "vit_base_patch16_224.augreg_in21k_ft_in1k"
(every built-in release on timm's hub) and bare architecture "vit_base_patch16_224", open_clip's
"MODEL.PRETRAINED" (zoo.OPEN_CLIP_NAMES), and aliases registered with `register_alias`.

On first use the registry fills itself: the built-in table (vitzoo/zoo.py), then third-party
entry points (vitzoo/plugins.py). Every operation is thread-safe: one re-entrant lock guards the
table, and while one thread loads plugins, the others wait until the zoo is complete. The origin
recorded for new entries ("user code", "built-in", "plugin (<dist>)") is per thread.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import inspect
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import plugins, zoo
from .licenses import commercial_use
from .model import VisionTransformer, ViTConfig, fit_pretrained_cfg, timm_default_cfg
from .pretrained_cfg import PretrainedCfg, pretrained_cfg_of

Builder = Callable[..., nn.Module]
USER_ORIGIN = "user code"


class UnknownModelError(LookupError):
    """An unknown model name or pretrained tag; the message suggests the closest names."""


class RegistryError(ValueError):
    """A registration that clashes with an existing one."""


# The kinds of alias: the library whose spelling it is, or "alias" (`register_alias`'s default).
ALIAS_KINDS = ("timm", "open_clip", "alias")
# Where a release's weights come from, by the library whose layout they are in (`source_kind`).
SOURCE_KINDS = ("timm", "open_clip", "transformers")
TIMM_HUB = zoo.TIMM_HUB
timm_release_name = zoo.timm_release_name  # timm's "arch.tag" of a release (the zoo states the rule)


@dataclass(frozen=True)
class Alias:
    """Another spelling of an entry: `spelling` means the entry with `tag` (None: the name alone,
    so its default tag, or a tag given after a dot)."""

    spelling: str
    tag: str | None
    kind: str  # one of ALIAS_KINDS


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
    family: str = ""  # the built-in table's family ("vit", "clip", "dinov2", ...); "" for user and plugin entries
    aliases: tuple[Alias, ...] = ()  # the other spellings that name this entry (timm's, open_clip's, ...)

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


@dataclass(frozen=True)
class Resolved:
    """A name resolved once, in any spelling: what `create`, `model_info`, `download` and the
    commands carry down instead of going back to the registry with the name."""

    given: str  # the name as the user spelled it
    entry: ModelEntry
    tag: str | None  # the tag the name selects (vitzoo's); None: none given, the default applies
    pretrained_cfg: PretrainedCfg | None  # the tag's source, else the default tag's; None: no source
    config: ViTConfig | None  # the architecture with the source's model_args; None: a builder entry
    alias: str  # the spelling given: "vitzoo", or one of ALIAS_KINDS

    @property
    def name(self) -> str:
        """vitzoo's spelling: "name" or "name.tag"."""
        return self.entry.name if self.tag is None else f"{self.entry.name}.{self.tag}"

    @property
    def model_args(self) -> dict[str, Any]:
        return dict(self.pretrained_cfg.model_args) if self.pretrained_cfg else {}

    @property
    def source(self) -> str | None:
        return self.pretrained_cfg.source if self.pretrained_cfg else None

    @property
    def license(self) -> str | None:
        return self.pretrained_cfg.license if self.pretrained_cfg else None

    @property
    def source_kind(self) -> str | None:
        return source_kind(self.entry, self.pretrained_cfg.tag) if self.pretrained_cfg else None

    def wants_weights(self, pretrained: bool | None) -> bool:
        """Whether building loads weights: as `pretrained` says; when it says nothing (None), a tag
        (given, or implied by an alias) asks for that tag's weights."""
        return pretrained if pretrained is not None else self.tag is not None


_lock = threading.RLock()
_entries: dict[str, ModelEntry] = {}
_seeded = False
_index: dict[str, tuple[str, Alias]] | None = None  # spelling -> (entry name, alias); None: to build
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
    global _index
    with _lock:
        _entries.clear()
        _entries.update(saved)
        _index = None


def unregister(name: str) -> ModelEntry:
    """Remove a registered name (and return its entry)."""
    _populate()
    with _lock:
        if name not in _entries:
            raise UnknownModelError(f"unknown model {name!r}: nothing to unregister")
        table = dict(_entries)
        entry = table.pop(name)
        restore(table)
        return entry


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
        table = {**_entries, entry.name: entry}
        index = _alias_index_of(table)  # an alias that clashes is refused before the table changes
        restore(table)
        global _index
        _index = index
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


# ----------------------------------------------------------------------------- aliases
def register_alias(alias: str, target: str, *, kind: str = "alias") -> ModelEntry:
    """Make `alias` another spelling of `target` ("name" or "name.tag", in any spelling), as the
    built-in table does for timm's and open_clip's names; `kind` says whose spelling it is (one of
    ALIAS_KINDS). A spelling that is a model name, or another model's alias, is refused
    (RegistryError). Returns the target's entry, which now carries the alias."""
    if not isinstance(alias, str) or not alias.isprintable() or not alias or any(ch in alias for ch in " :"):
        raise RegistryError(f"alias {alias!r} is invalid: expected a non-empty printable name without ':' or spaces")
    if kind not in ALIAS_KINDS:
        raise ValueError(f"register_alias: kind={kind!r} is invalid; expected one of {', '.join(ALIAS_KINDS)}")
    with _lock:
        resolved = resolve(target)
        entry = resolved.entry
        if any(a.spelling == alias for a in entry.aliases):
            return entry  # the same alias again
        _refuse_release_shadow(alias, entry.name, resolved.tag, _alias_index())
        new = dataclasses.replace(entry, aliases=(*entry.aliases, Alias(alias, resolved.tag, kind)))
        return _add(new, override=True)


def _refuse_release_shadow(alias: str, name: str, tag: str | None, index: dict[str, tuple[str, Alias]]) -> None:
    """RegistryError where a new alias would make one spelling mean two releases: "base.tag" naming
    another release than base's model's `tag` (base an untagged alias), or an untagged alias "base"
    under which an existing "base.tag" alias names another release than `name`'s `tag`."""
    base, alias_tag = split_name(alias)
    if alias_tag is not None:  # "base.tag": what base's model reads it as
        owner = index.get(base)
        pairs = [(alias, owner[0], alias_tag)] if owner is not None and owner[1].tag is None else []
        new: tuple[str, str | None] | None = (name, tag)
    else:  # "base": the existing "base.tag" aliases it would read ("base" itself has no dot)
        pairs = [(s, name, s.partition(".")[2]) for s in index if s.startswith(alias + ".")]
        new = None
    for spelling, model, release in pairs:
        meant = new if new is not None else (index[spelling][0], index[spelling][1].tag)
        if release in _entries[model].pretrained and meant != (model, release):
            via = split_name(spelling)[0]
            raise RegistryError(
                f"the alias {alias!r} would make {spelling!r} name two things: {model}.{release} (the alias "
                f"{via!r} with a tag) and {meant[0]}{'' if meant[1] is None else '.' + meant[1]}; a spelling "
                "names one model: pick another alias"
            )


def _alias_index_of(table: dict[str, ModelEntry]) -> dict[str, tuple[str, Alias]]:
    """spelling -> (entry name, alias) over `table`; RegistryError where an alias is a model name,
    or names another model than the same spelling does elsewhere, or is "base.tag" whose base is a
    model name (which reads as that model's tag)."""
    index: dict[str, tuple[str, Alias]] = {}
    for entry in table.values():
        for alias in entry.aliases:
            base = split_name(alias.spelling)[0]
            clash = alias.spelling if alias.spelling in table else base if base in table else None
            if clash is not None:
                raise RegistryError(
                    f"the {alias.kind} name {alias.spelling!r} of {_target(entry, alias)} (origin: {entry.origin}) "
                    f"clashes with the model name {clash!r} (origin: {table[clash].origin}); "
                    "a spelling names one model: pick another name or alias"
                )
            old = index.get(alias.spelling)
            if old is not None and (old[0], old[1].tag) != (entry.name, alias.tag):
                raise RegistryError(
                    f"the {alias.kind} name {alias.spelling!r} is ambiguous: it names "
                    f"{_target(table[old[0]], old[1])} and {_target(entry, alias)}; a spelling names one model"
                )
            index[alias.spelling] = (entry.name, alias)
    return index


def _target(entry: ModelEntry, alias: Alias) -> str:
    return repr(entry.name if alias.tag is None else f"{entry.name}.{alias.tag}")


def _alias_index() -> dict[str, tuple[str, Alias]]:
    global _index
    with _lock:
        if _index is None:
            _index = _alias_index_of(_entries)
        return _index


def source_kind(entry: ModelEntry, tag: str | None) -> str | None:
    """Whose layout a release's weights are in (one of SOURCE_KINDS): timm's hub ("hf-hub:timm/...");
    open_clip, for a release of open_clip's own files (any repository); transformers, for any other
    hub repository. None for a tag without source, or a local one."""
    cfg = entry.pretrained.get(tag) if tag is not None else None
    source = cfg.source if cfg is not None else None
    if cfg is None or not source:
        return None
    if "open_clip" in cfg.extra or any(a.kind == "open_clip" and a.tag == tag for a in entry.aliases):
        if timm_release_name(cfg) is None:  # open_clip's own files, even in a repository timm named
            return "open_clip"
    if source.startswith(TIMM_HUB) or "timm" in cfg.extra:  # timm's layout, any repository
        return "timm"
    return "transformers" if source.startswith("hf-hub:") else None


# ----------------------------------------------------------------------------- looking up
def split_name(name: str) -> tuple[str, str | None]:
    """ "vit_b16.augreg_in1k" -> ("vit_b16", "augreg_in1k"); "vit_b16" -> ("vit_b16", None). The
    spelling only: `resolve` says which entry and tag a name means."""
    base, _, tag = name.partition(".")
    return base, (tag or None)


def resolve(name: str) -> Resolved:
    """What `name` means, in any spelling: vitzoo's "name[.tag]", timm's "arch[.tag]", open_clip's
    "MODEL.PRETRAINED" or a registered alias. UnknownModelError, with the closest names in every
    spelling, for a name the registry does not know, or a tag the model has not."""
    entry, tag, kind, base = _lookup(name)
    if tag is None:
        pcfg = entry.pretrained[entry.default_tag] if entry.default_tag else None
    elif tag in entry.pretrained:
        pcfg = entry.pretrained[tag]
    else:
        known = ", ".join(f"{entry.name}.{t}" for t in entry.pretrained) or "none"
        named = repr(entry.name) if kind == "vitzoo" else f"{base!r} (vitzoo's {entry.name!r})"
        raise UnknownModelError(f"model {named} has no pretrained tag {tag!r}; known: {known}")
    args = pcfg.model_args if pcfg else {}
    config = entry.config.replace(**args) if entry.config is not None and args else entry.config
    return Resolved(name, entry, tag, pcfg, config, kind)


def _lookup(name: str) -> tuple[ModelEntry, str | None, str, str]:
    """The entry `name` spells, the tag it selects (unchecked), the kind of spelling and its base."""
    _populate()
    if not isinstance(name, str):
        raise TypeError(f"model name must be a str, got {type(name).__name__}")
    with _lock:
        index = _alias_index()
        hit = index.get(name)
        base, tag = split_name(name)
        if hit is not None:  # an alias names the whole spelling, tag included
            return _entries[hit[0]], hit[1].tag, hit[1].kind, base
        if base in _entries:
            return _entries[base], tag, "vitzoo", base
        if base in index and index[base][1].tag is None:  # an alias of a name, with a tag after it
            return _entries[index[base][0]], tag, index[base][1].kind, base
        close = _close_matches(name, base, index)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    raise UnknownModelError(f"unknown model {_as_typed(name, base)}{hint} (vitzoo.list_models() shows all names)")


def _as_typed(name: str, base: str) -> str:
    """An unknown name as the user typed it: its base where a tag follows one ("'vit_b17' in
    'vit_b17.x'"), the whole of it where it has no base ('.x', '../weights'); a path said to be one."""
    shown = repr(base) if base and base != name else repr(name)
    if base and base != name:
        shown += f" (in {name!r})"
    if "/" in name or "\\" in name:
        shown += (
            ", which looks like a path: a model is named here; give weights files or folders with weights= / --weights"
        )
    return shown


def _close_matches(name: str, base: str, index: dict[str, tuple[str, Alias]]) -> list[str]:
    """The registered spellings closest to an unknown `name`: names and untagged aliases by its
    base, tagged aliases by the whole name."""
    untagged = [*_entries, *(s for s in index if "." not in s)]
    scored = [
        (s, difflib.SequenceMatcher(None, base, s).ratio()) for s in difflib.get_close_matches(base, untagged, 5, 0.5)
    ]
    if "." in name:
        tagged = [s for s in index if "." in s]
        scored += [
            (s, difflib.SequenceMatcher(None, name, s).ratio()) for s in difflib.get_close_matches(name, tagged, 5, 0.5)
        ]
    return [s for s, _ in sorted(scored, key=lambda x: -x[1])[:5]]


def get_entry(name: str) -> ModelEntry:
    """The entry `name` (any spelling) means; its tag is not checked (`resolve` checks it)."""
    return _lookup(name)[0]


def wants_weights(name: str, pretrained: bool | None) -> bool:
    """Whether building `name` loads its weights: as `pretrained` says; when it says nothing (None),
    a ".tag" asks for that tag's weights. pretrained=False with a tag is timm's spelling of the
    architecture those weights need, randomly initialised."""
    return resolve(name).wants_weights(pretrained)


def get_pretrained_cfg(name: str) -> tuple[ModelEntry, PretrainedCfg | None]:
    """The entry for `name` and the pretrained source its tag (or the default) selects."""
    resolved = resolve(name)
    return resolved.entry, resolved.pretrained_cfg


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
    *,
    family: str | Sequence[str] | None = None,
    source: str | Sequence[str] | None = None,
    commercial: bool = False,
    spelling: str = "vitzoo",
) -> list[str]:
    """Registered names matching shell-style `pattern`(s) in any spelling (vitzoo's, timm's,
    open_clip's, an alias), listed in vitzoo's. pretrained=True lists "name.tag" for every
    pretrained source; pretrained=False lists only names without any source. `exclude` patterns
    drop listed names.

    Filters of the sources, which keep "name.tag" with pretrained=True, else the names that have at
    least one such source: `license` (a Hub licence id such as "apache-2.0", or several;
    case-insensitive), `source` (whose layout the weights are in: SOURCE_KINDS), `commercial`
    (a stated licence that does not forbid commercial use). `family` keeps the built-in table's
    families ("clip", "dinov2", ...). `spelling` "timm" or "open_clip" lists the names in that
    library's spelling instead (a name without one is left out; open_clip names are releases:
    pretrained=True)."""
    _populate()
    patterns = _compiled(pattern)
    excludes = _compiled(exclude)
    keep = _release_filter(license, source, commercial, pretrained)
    families = _wanted(family, "family", "a family such as 'clip'")
    if spelling not in ("vitzoo", "timm", "open_clip"):
        raise ValueError(f"list_models: spelling={spelling!r} is invalid; expected 'vitzoo', 'timm' or 'open_clip'")
    names: list[str] = []
    for entry in snapshot().values():
        if families is not None and entry.family.lower() not in families:
            continue
        tags = [t for t, cfg in entry.pretrained.items() if keep is None or keep(entry, t, cfg)]
        if pretrained is True:
            candidates: list[str | None] = list(tags)
        elif pretrained is False:
            candidates = [] if entry.pretrained else [None]
        else:
            candidates = [None] if keep is None or tags else []
        for tag in candidates:
            if any(p.match(s) for s in _spellings(entry, tag) for p in patterns):
                names += [n for n in _spelled(entry, tag, spelling) if not any(e.match(n) for e in excludes)]
    return sorted(names)


def _spellings(entry: ModelEntry, tag: str | None) -> list[str]:
    """Every spelling a pattern may match: of the name (and, listing names, every alias), and of
    the release `tag`."""
    names = [entry.name, *(a.spelling for a in entry.aliases if a.tag is None or tag is None or a.tag == tag)]
    return names if tag is None else [*names, f"{entry.name}.{tag}"]


def _spelled(entry: ModelEntry, tag: str | None, spelling: str) -> list[str]:
    if spelling == "vitzoo":
        return [entry.name if tag is None else f"{entry.name}.{tag}"]
    return [a.spelling for a in entry.aliases if a.kind == spelling and a.tag == tag]


def _compiled(patterns: str | Sequence[str]) -> list[re.Pattern[str]]:
    listed = [patterns] if isinstance(patterns, str) else list(patterns)
    return [re.compile(fnmatch.translate(p)) for p in listed]


def _wanted(value: str | Sequence[str] | None, what: str, expected: str) -> set[str] | None:
    """A filter's values (one or several), lower case; None keeps everything."""
    if value is None:
        return None
    wanted = [value] if isinstance(value, str) else list(value)
    if not wanted or not all(isinstance(x, str) and x.strip() for x in wanted):
        raise ValueError(f"list_models: {what}={value!r} is invalid; expected {expected}")
    return {x.strip().lower() for x in wanted}


def _release_filter(
    license: str | Sequence[str] | None, source: str | Sequence[str] | None, commercial: bool, pretrained: bool | None
) -> Callable[[ModelEntry, str, PretrainedCfg], bool] | None:
    """Whether `list_models` keeps a source; None keeps every one."""
    licenses = _wanted(license, "license", "a licence id such as 'apache-2.0'")
    kinds = _wanted(source, "source", "one of " + ", ".join(SOURCE_KINDS))
    if kinds is not None and not kinds <= set(SOURCE_KINDS):
        raise ValueError(f"list_models: source={source!r} is invalid; expected one of {', '.join(SOURCE_KINDS)}")
    if licenses is None and kinds is None and not commercial:
        return None
    if pretrained is False:
        raise ValueError(
            "list_models: license, source and commercial filter pretrained sources; "
            "pretrained=False lists names that have none"
        )

    def keep(entry: ModelEntry, tag: str, cfg: PretrainedCfg) -> bool:
        return (
            (licenses is None or (cfg.license or "").lower() in licenses)
            and (kinds is None or source_kind(entry, tag) in kinds)
            and (not commercial or commercial_use(cfg.license))
        )

    return keep


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def as_resolved(name: str | Resolved) -> Resolved:
    """`name` resolved, unless it is already (what callers that resolved once pass down)."""
    return name if isinstance(name, Resolved) else resolve(name)


def build_meta(name: str | Resolved, **overrides: Any) -> nn.Module:
    """The registered model `name` built on the meta device, a tag's own fields (e.g. the
    activation its weights need) included: its shapes, parameter count and bytes, nothing allocated."""
    resolved = as_resolved(name)
    with torch.device("meta"):
        return resolved.entry.builder(**{**resolved.model_args, **overrides})


def _architecture(resolved: Resolved) -> tuple[ViTConfig | None, nn.Module | None]:
    """The ViTConfig a resolved name builds, and the model built on the meta device where it had to
    be (a builder entry; None for a config, whose figures are arithmetic)."""
    if resolved.config is not None:
        return resolved.config, None
    model = build_meta(resolved)
    config = getattr(model, "config", None)
    return (config if isinstance(config, ViTConfig) else None), model


def model_summary(name: str | Resolved) -> dict[str, Any]:
    """What a listing shows of a name, without building it where it is a config (`vitzoo list`
    lists hundreds): name, family, origin, timm counterpart, aliases, config (a ViTConfig or None),
    parameter count, the pretrained tags, the preprocessing's input size."""
    resolved = as_resolved(name)
    entry = resolved.entry
    config, model = _architecture(resolved)
    if model is not None:
        num_params = count_parameters(model)
    else:
        assert config is not None  # _architecture builds what is no config
        num_params = config.num_params
    return {
        "name": entry.name,
        "family": entry.family,
        "origin": entry.origin,
        "timm_name": entry.timm_name,
        "aliases": [dataclasses.asdict(a) for a in entry.aliases],
        "config": config,
        "num_params": num_params,
        "pretrained": list(entry.pretrained),
        "input_size": list(_preprocessing(resolved, config, model).input_size),
    }


def model_info(name: str | Resolved) -> dict[str, Any]:
    """Config, parameter count, pretrained sources and origin of a registered model (plain data).
    Nothing is allocated: a builder entry is built on the meta device to count its parameters.
    "preprocessing" is timm's whole pretrained cfg of the name (`timm_pretrained_cfg`)."""
    resolved = as_resolved(name)
    entry, pcfg = resolved.entry, resolved.pretrained_cfg
    summary = model_summary(resolved)
    config = summary.pop("config")
    del summary["input_size"], summary["pretrained"]
    return {
        **summary,
        "description": entry.description,
        "config": config.to_dict() if config is not None else None,
        "default_pretrained": pcfg.tag if pcfg else None,
        "pretrained": {tag: cfg.to_dict() for tag, cfg in entry.pretrained.items()},
        "preprocessing": timm_pretrained_cfg(resolved),
    }


def timm_pretrained_cfg(name: str | Resolved) -> dict[str, Any]:
    """timm's whole pretrained cfg of `name` ("name" or "name.tag", any spelling), one dict: the
    preprocessing of the source the tag (or the default tag) selects, or of the name without
    weights, and the keys timm derives from the architecture (fixed_input_size, first_conv,
    classifier: the architecture the tag builds). The same keys and values as the `default_cfg`
    of the model `create(name)` builds; nothing is built where the name is a config."""
    resolved = as_resolved(name)
    config, model = _architecture(resolved)
    cfg = _preprocessing(resolved, config, model)
    return timm_default_cfg(cfg, config) if config is not None else cfg.to_dict()


def _preprocessing(resolved: Resolved, config: ViTConfig | None, model: nn.Module | None) -> PretrainedCfg:
    """The pretrained cfg of a resolved name: its source's, or the one it carries without weights
    (`model`: a builder entry's model, whose own cfg comes after the entry's)."""
    entry, pcfg = resolved.entry, resolved.pretrained_cfg
    own = pretrained_cfg_of(model) if model is not None else None
    if config is None:  # a plugin builder that makes no ViT: its cfg alone
        return pcfg or entry.default_cfg or own or PretrainedCfg()
    return pcfg or weightless_cfg(entry, config) or own or fit_pretrained_cfg(PretrainedCfg(), config)


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
    global _seeded, _index
    with _lock:
        if not _seeded:
            table = {**_entries, **_builtin_entries()}  # checked once as a whole: one table, one pass
            index = _alias_index_of(table)
            restore(table)
            _index = index
            _seeded = True
        plugins.discover(_PLUGIN_ACCESS)


def _builtin_entries() -> dict[str, ModelEntry]:
    """The zoo's table as entries, each with its timm and open_clip spellings: "arch.tag" for a
    release on timm's hub, a bare "arch" for the first model of that timm architecture, and
    zoo.OPEN_CLIP_NAMES (RegistryError where one names no release of the table)."""
    open_clip: dict[str, list[Alias]] = {}
    for spelling, target in getattr(zoo, "OPEN_CLIP_NAMES", {}).items():
        base, tag = split_name(target)
        open_clip.setdefault(base, []).append(Alias(spelling, tag, "open_clip"))
    entries: dict[str, ModelEntry] = {}
    bare: set[str] = set()
    for model in zoo.MODELS:
        if model.name in entries:
            raise RegistryError(f"the built-in table lists the model name {model.name!r} twice")
        aliases = []
        if model.timm_name and model.timm_name not in bare and model.timm_name != model.name:
            bare.add(model.timm_name)
            aliases.append(Alias(model.timm_name, None, "timm"))
        for tag, cfg in model.pretrained.items():
            timm_name = timm_release_name(cfg)
            if timm_name is not None:
                aliases.append(Alias(timm_name, tag, "timm"))
        for alias in open_clip.pop(model.name, []):
            if alias.tag is not None and alias.tag not in model.pretrained:
                raise RegistryError(
                    f"zoo.OPEN_CLIP_NAMES: {alias.spelling!r} names {model.name}.{alias.tag}, a tag the model has not"
                )
            aliases.append(alias)
        entries[model.name] = ModelEntry(
            name=model.name,
            builder=_config_builder(model.config),
            config=model.config,
            pretrained=_to_pretrained_dict(model.pretrained),
            default_cfg=model.default_cfg,
            origin="built-in",
            description=model.description,
            timm_name=model.timm_name,
            family=model.family,
            aliases=tuple(aliases),
        )
    if open_clip:
        unknown = ", ".join(repr(a.spelling) for aliases in open_clip.values() for a in aliases)
        raise RegistryError(f"zoo.OPEN_CLIP_NAMES: {unknown} name(s) no model of the built-in table")
    return entries


_PLUGIN_ACCESS = plugins.RegistryAccess(
    lock=_lock, origin=origin, snapshot=snapshot, restore=restore, clash_error=RegistryError
)
