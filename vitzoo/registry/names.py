"""Names: what a name means in any spelling (`resolve`) — vitzoo's "name[.tag]", timm's
"arch[.tag]", open_clip's "MODEL.PRETRAINED" and aliases (`register_alias`) — and the lookups
built on it. An unknown name is one UnknownModelError that shows it as typed and suggests the
closest spellings; an alias that would make one spelling name two releases is refused."""

from __future__ import annotations

import dataclasses
import difflib

from .. import zoo
from ..model import ViTConfig
from ..pretrained_cfg import PretrainedCfg
from .entry import (
    ALIAS_KINDS,
    Alias,
    ModelEntry,
    RegistryError,
    Resolved,
    UnknownModelError,
    split_name,
    timm_release_name,
)
from .table import _add, _alias_index, _entries, _lock, _populate


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
        why = zoo.REFUSED_RELEASES.get(f"{entry.name}.{tag}")
        refused = f" (refused: {why})" if why else ""
        raise UnknownModelError(f"model {named} has no pretrained tag {tag!r}{refused}; known: {known}")
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


def timm_architecture_config(timm_name: str) -> ViTConfig | None:
    """The ViTConfig of timm's architecture `timm_name` (without tag) as the registry holds it, None
    where it holds none: the config of a generated timm release of it (`extra["timm"]`: its
    model_args build timm's architecture, tests/zoo/test_timm_releases.py), else of the entry whose
    timm counterpart it is, else of a release the registry spells "<timm_name>.<tag>" (SigLIP 2's
    size tags). A curated model may compute otherwise than its timm counterpart (OpenAI's CLIP in
    its QuickGELU form), its generated releases of timm's architecture as timm does."""
    _populate()
    with _lock:
        releases = [
            (cfg, e)
            for e in _entries.values()
            for cfg in e.pretrained.values()
            if (timm_release_name(cfg) or "").partition(".")[0] == timm_name
        ]
        entry = next((e for e in _entries.values() if e.timm_name == timm_name), None)
    generated = next(((cfg, e) for cfg, e in releases if "timm" in cfg.extra), None)
    if generated is None and entry is not None:
        return entry.resolve_config()
    found = generated or next(iter(releases), None)
    if found is None:
        return None
    return found[1].resolve_config(**found[0].model_args)


def timm_counterparts() -> dict[str, str]:
    """{vitzoo name: timm architecture} for every entry that has a timm counterpart."""
    _populate()
    with _lock:
        return {e.name: e.timm_name for e in _entries.values() if e.timm_name}


def as_resolved(name: str | Resolved) -> Resolved:
    """`name` resolved, unless it is already (what callers that resolved once pass down)."""
    return name if isinstance(name, Resolved) else resolve(name)
