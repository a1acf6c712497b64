"""The table of registered entries and its thread-safety: one re-entrant lock guards the entries
and the index of their other spellings; on first use the table fills itself (the built-in table of
vitzoo/zoo, then third-party entry points through vitzoo/plugins.py), and while one thread loads
plugins the others wait until the zoo is complete. Every change goes through `_add`, which refuses
a spelling that would name two models before the table changes. The origin recorded for new
entries ("user code", "built-in", "plugin (<dist>)") is per thread (`origin`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import plugins, zoo
from ..model import VisionTransformer, ViTConfig
from ..pretrained_cfg import PretrainedCfg
from .entry import (
    USER_ORIGIN,
    Alias,
    Builder,
    ModelEntry,
    RegistryError,
    UnknownModelError,
    split_name,
    timm_release_name,
)

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


def _config_builder(config: ViTConfig) -> Builder:
    def build(**overrides: Any) -> VisionTransformer:
        return VisionTransformer(config.replace(**overrides))

    return build


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
