"""Registering: a builder function (`register_model`) or a config variant of a registered name or
a ViTConfig (`register`). Above the names (names.py), since a variant's base may be given in any
spelling; removing a name and adding an alias are the table's and the names' own."""

from __future__ import annotations

import inspect
from typing import Any

from ..model import ViTConfig
from ..pretrained_cfg import PretrainedCfg
from .entry import Builder, ModelEntry
from .names import get_entry
from .table import _add, _config_builder, _populate, _to_pretrained_dict, current_origin


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
