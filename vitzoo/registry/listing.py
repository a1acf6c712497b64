"""Listing: `list_models`, the registered names matching shell-style patterns in any spelling,
with its filters of the sources (licence, whose layout, commercial use), of the families, and the
spelling to list them in."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence

from ..licenses import commercial_use
from ..pretrained_cfg import PretrainedCfg
from .entry import SOURCE_KINDS, ModelEntry, source_kind
from .table import _populate, snapshot


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
