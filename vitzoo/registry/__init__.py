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

On first use the registry fills itself: the built-in table (vitzoo/zoo), then third-party
entry points (vitzoo/plugins.py). Every operation is thread-safe: one re-entrant lock guards the
table, and while one thread loads plugins, the others wait until the zoo is complete. The origin
recorded for new entries ("user code", "built-in", "plugin (<dist>)") is per thread.

One module per concern, each importing only those before it: entry.py (what an entry is),
table.py (the entries, their lock, filling and origins), names.py (spellings: `resolve`,
`register_alias`), registering.py (`register`, `register_model`), info.py (`model_info`) and
listing.py (`list_models`). This package hands their names on.
"""

from __future__ import annotations

from .entry import (
    ALIAS_KINDS,
    SOURCE_KINDS,
    TIMM_HUB,
    USER_ORIGIN,
    Alias,
    Builder,
    ModelEntry,
    RegistryError,
    Resolved,
    UnknownModelError,
    source_kind,
    split_name,
    timm_release_name,
)
from .info import (
    build_meta,
    count_parameters,
    get_pretrained_cfg_value,
    model_info,
    model_summary,
    timm_pretrained_cfg,
    weightless_cfg,
)
from .listing import list_models
from .names import (
    as_resolved,
    find_by_timm_name,
    get_entry,
    get_pretrained_cfg,
    register_alias,
    resolve,
    timm_architecture_config,
    timm_counterparts,
    wants_weights,
)
from .registering import register, register_model
from .table import _alias_index_of as _alias_index_of  # the table's own checks, called by tests
from .table import _builtin_entries as _builtin_entries
from .table import current_origin, loaded_plugins, origin, restore, snapshot, unregister

__all__ = [
    "ALIAS_KINDS",
    "SOURCE_KINDS",
    "TIMM_HUB",
    "USER_ORIGIN",
    "Alias",
    "Builder",
    "ModelEntry",
    "RegistryError",
    "Resolved",
    "UnknownModelError",
    "as_resolved",
    "build_meta",
    "count_parameters",
    "current_origin",
    "find_by_timm_name",
    "get_entry",
    "get_pretrained_cfg",
    "get_pretrained_cfg_value",
    "list_models",
    "loaded_plugins",
    "model_info",
    "model_summary",
    "origin",
    "register",
    "register_alias",
    "register_model",
    "resolve",
    "restore",
    "snapshot",
    "source_kind",
    "split_name",
    "timm_architecture_config",
    "timm_counterparts",
    "timm_pretrained_cfg",
    "timm_release_name",
    "unregister",
    "wants_weights",
    "weightless_cfg",
]
