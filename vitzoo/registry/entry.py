"""What the registry holds: an entry (`ModelEntry`: a name, its builder, its config, its pretrained
sources and its other spellings), a name resolved once (`Resolved`), and the errors of the
registry. Plain data, and the rules that need nothing but an entry or a name (`source_kind`,
`split_name`), so that the table (table.py), the names (names.py), `model_info` (info.py) and the
listing (listing.py) share one definition of each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .. import zoo
from ..model import ViTConfig
from ..pretrained_cfg import PretrainedCfg

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


def split_name(name: str) -> tuple[str, str | None]:
    """ "vit_b16.augreg_in1k" -> ("vit_b16", "augreg_in1k"); "vit_b16" -> ("vit_b16", None). The
    spelling only: `resolve` says which entry and tag a name means."""
    base, _, tag = name.partition(".")
    return base, (tag or None)
