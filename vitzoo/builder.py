"""Building models by name: the one place where the registry (names, configs, sources) meets
vitzoo.weights (reading and converting checkpoints), as timm's `_builder.py` does.

    vitzoo.create("vit_b16", num_classes=10)                         # random init, config overrides
    vitzoo.create("vit_b16", pretrained=True)                        # the name's default source
    vitzoo.create("vit_b16.augreg_in21k_ft_in1k")                    # a tag picks another source
    vitzoo.create("vit_base_patch16_clip_224.openai")                # timm's and open_clip's names too
    vitzoo.create("vit_s16", weights="ViT-S_16.npz")                 # any file / dir / hub / timm source
    vitzoo.from_pretrained("out/")                                   # the architecture comes from the source
    vitzoo.download("vit_b16"); vitzoo.convert("src", "dst/")

The weights flow runs one way: vitzoo.weights reads the source (`read_source`), this module
explains the architecture name the source states through the registry (`resolve_architecture`:
vitzoo's or timm's "architecture" means what the registry says it means) and builds the model,
then vitzoo.weights finishes loading (`load_checkpoint`: verify, adapt, load). The pretrained cfg
is computed once, after loading, and attached once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import registry
from .atomic import write_safetensors
from .features import feature_model
from .layout import CONFIG_NAME, WEIGHTS_NAME, attach_architecture, save_pretrained
from .memory import human_bytes, model_bytes, require_memory
from .model import VisionTransformer, ViTConfig
from .model.fields import renamed_fields
from .precision import cast_model, check_castable, name_of, parse_dtype
from .pretrained_cfg import PretrainedCfg, attach_pretrained_cfg, check_pretrained_fields, pretrained_cfg_of
from .push import write_repo
from .upload import attach_repo_writer
from .weight_shards import is_index
from .weights import (
    Architecture,
    Checkpoint,
    WeightsError,
    WeightsNotFoundError,
    build_args,
    check_named_args,
    export,
    load_checkpoint,
    pretrained_cfg_for,
    read_source,
    vit_config,
)
from .weights.adapt import FitReport
from .weights.exporter import EXPORT_FORMATS
from .weights.files import reading_partially, weight_files
from .weights.hub import HF_PREFIX, TIMM_PREFIX, WEIGHT_FILES, fetch_source, parse_hub_ref, timm_hub_ref
from .weights.hub_sizes import StoredSize, stored_size
from .weights.sources import check_local_source
from .weights.timm_files import check_timm_architecture

Source = str | os.PathLike[str]


def resolve_architecture(name: str) -> Architecture | None:
    """What a checkpoint's architecture name means: a registered vitzoo name, or the timm
    architecture of a registered entry. None when the registry knows neither."""
    try:  # vitzoo's name, timm's architecture, or another spelling the registry knows
        entry: registry.ModelEntry | None = registry.get_entry(name)
    except registry.UnknownModelError:
        entry = registry.find_by_timm_name(name)
    if entry is None:
        return None
    try:
        config: dict[str, Any] | None = entry.resolve_config().to_dict()
    except (TypeError, ValueError, WeightsError):
        config = None  # a plugin builder that makes no ViT: its name still gives preprocessing
    return Architecture(entry.name, config, entry.default_cfg)


def _read(source: Source) -> tuple[Checkpoint, Architecture | None]:
    """`source` read by vitzoo.weights, with the architecture it names explained by the registry."""
    ckpt = read_source(source)
    name = ckpt.names
    arch = resolve_architecture(name) if name is not None else None
    ckpt.apply_architecture(arch)
    check_timm_architecture(ckpt, registered=arch is not None)
    return ckpt, arch


def create(
    name: str,
    pretrained: bool | None = None,
    weights: Source | None = None,
    pretrained_cfg_overlay: dict[str, Any] | None = None,
    dtype: str | torch.dtype | None = None,
    features_only: bool = False,
    out_indices: int | Sequence[int] | None = None,
    feature_cls: str | None = None,
    text: bool = False,
    **overrides: Any,
) -> nn.Module:
    """Build a registered model; `overrides` replace config fields (num_classes, img_size, ...).
    `name` may be spelled as vitzoo, timm ("arch.tag") or open_clip ("MODEL.PRETRAINED") name it
    (registry.resolve): the same entry, tag and pretrained cfg.

    pretrained=True loads the name's default source (or the one its ".tag" selects), and so does a
    ".tag" by itself; pretrained=False loads nothing: "name.tag" is then the architecture and
    preprocessing of that tag's weights, randomly initialised (timm's create_model(..., pretrained=False));
    "hf-hub:org/repo[@rev]" as the name builds what that repository states (from_pretrained);
    weights=SOURCE loads a file, directory, "hf-hub:org/repo" or "timm:<name>" instead.
    `pretrained_cfg_overlay` (as in timm) replaces preprocessing fields of `model.pretrained_cfg`
    (mean, std, crop_pct, crop_mode, interpolation, label_names, ...): the user's word wins over
    the checkpoint's. `dtype` ("fp32", "bf16", "fp16", "auto" or a torch dtype) casts the model
    for inference (see vitzoo/precision.py), refused where a weight is beyond that precision's range;
    None keeps fp32. `features_only=True` returns timm's feature model instead (vitzoo/features.py):
    the maps of the `out_indices` blocks (default: the last three), `feature_cls` None or "getter".
    `text=True` returns the whole image-text model instead (vitzoo.text.ImageTextModel: this
    image tower, its text tower, tokenizer and logit scale), read from an open_clip or transformers
    layout (`weights`, or the name's default source)."""
    # a field's old name (model/fields.py RENAMED_FIELDS) as its new one, before any key is compared
    overrides = renamed_fields(overrides)
    if text:
        return _create_image_text(name, pretrained, weights, dtype, features_only, pretrained_cfg_overlay, overrides)
    if not features_only and (out_indices is not None or feature_cls is not None):
        raise TypeError("create: out_indices and feature_cls need features_only=True")
    torch_dtype = parse_dtype(dtype, "cpu")[0] if dtype is not None else None
    model = _create(name, pretrained, weights, torch_dtype, **overrides)
    if torch_dtype is not None:
        model = cast_model(model, torch_dtype)  # what loading left in fp32: buffers, a random model
    if pretrained_cfg_overlay:
        cfg = pretrained_cfg_of(model) or PretrainedCfg()
        unknown = sorted(set(pretrained_cfg_overlay) - set(cfg.to_dict()))
        if unknown:
            raise TypeError(
                f"pretrained_cfg_overlay: unknown field(s) {', '.join(map(repr, unknown))}; "
                f"valid fields: {', '.join(cfg.to_dict())}"
            )
        changes = check_pretrained_fields(pretrained_cfg_overlay)
        attach_pretrained_cfg(model, cfg.replace(**changes))
    if features_only:
        return feature_model(model, out_indices, feature_cls)
    return model


def _create_image_text(
    name: str,
    pretrained: bool | None,
    weights: Source | None,
    dtype: str | torch.dtype | None,
    features_only: bool,
    overlay: dict[str, Any] | None,
    overrides: dict[str, Any],
) -> nn.Module:
    from .text.load import create_image_text

    unsupported = [
        k for k, v in (("dtype", dtype), ("features_only", features_only), ("pretrained_cfg_overlay", overlay)) if v
    ]
    unsupported += sorted(overrides)
    if unsupported:
        raise TypeError(
            f"create(..., text=True) does not take {', '.join(unsupported)}: the checkpoint decides the towers"
        )
    return create_image_text(name, pretrained=pretrained, weights=weights)


def _create(
    name: str, pretrained: bool | None, weights: Source | None, dtype: torch.dtype | None, **overrides: Any
) -> nn.Module:
    if name.startswith(HF_PREFIX):  # timm's spelling: the repository names its architecture
        if weights is not None or overrides:
            raise TypeError(
                f"create({name!r}): a hub repository states its own config and weights; "
                "expected no weights= or field overrides (build a registered name with weights= instead)"
            )
        return from_pretrained(name, dtype=dtype)
    resolved = registry.resolve(name)  # once: everything below reads this record
    entry, pcfg, tag = resolved.entry, resolved.pretrained_cfg, resolved.tag
    loading = weights is not None or resolved.wants_weights(pretrained)
    # not on the meta device, nor a GPU's memory; nor weights left unread (fsdp_load: sharded later)
    if weights is not None:
        check_local_source(weights)  # a truncated file named before a refusal for its size
    if (loading and not reading_partially()) or (not loading and torch.empty(()).device.type == "cpu"):
        require_weights_memory(
            name, registry.build_meta(resolved, **overrides), dtype if loading else None, loading=loading
        )
    if loading:
        if weights is None:
            if pcfg is None or pcfg.source is None:
                raise WeightsError(
                    f"model {entry.name!r} has no pretrained weights registered; pass weights=<file, directory, "
                    "'hf-hub:org/repo' or 'timm:<name>'> (vitzoo.list_models(pretrained=True) lists names with weights)"
                )
            if resolved.source_kind == "open_clip":  # the image tower of open_clip's own layout
                return _build_pretrained(entry, pcfg.source, pcfg, overrides, dtype, tag=pcfg.tag, open_clip=True)
            return _build_pretrained(entry, pcfg.source, pcfg, overrides, dtype, tag=pcfg.tag)
        if tag is not None and pcfg is not None:  # the tag decides architecture and preprocessing, whatever the copy
            return _build_pretrained(entry, weights, pcfg.replace(source=None), overrides, dtype, tag=tag)
        return _build_pretrained(entry, weights, entry.default_cfg, overrides, dtype)
    named = pcfg if tag is not None else None  # a tag without its weights: their architecture, untrained
    model = entry.builder(**{**(named.model_args if named else {}), **overrides})
    config = getattr(model, "config", None)
    cfg = registry.weightless_cfg(entry, config, named) if isinstance(config, ViTConfig) else entry.default_cfg
    if cfg is not None and hasattr(model, "pretrained_cfg"):
        attach_pretrained_cfg(model, cfg)
    name_model(model, entry.name)
    return model


def name_model(model: nn.Module, name: str) -> None:
    """Record the registered architecture `model` was built as, which saved and pushed models
    name, and hand it the writer that pushes it in timm's layout where timm has the architecture."""
    attach_architecture(model, name)
    attach_repo_writer(model, write_repo)


def require_weights_memory(name: str, meta: nn.Module, dtype: torch.dtype | None, *, loading: bool) -> None:
    """Refuse (memory.InsufficientMemoryError) a model whose weights alone exceed the memory this
    process may allocate, before any is: `meta` is the model built on the meta device, `dtype`
    the one its weights load in (None: the builder's; a random initialisation is built in it
    whatever dtype it is cast to after). The checkpoint read beside them is not counted."""
    built = dtype or next((p.dtype for p in meta.parameters()), torch.float32)
    count = sum(p.numel() for p in meta.parameters())
    ways = []
    if built.itemsize > torch.bfloat16.itemsize:
        bf16 = human_bytes(model_bytes(meta, torch.bfloat16))
        later = "" if loading else "; a random initialisation is built in fp32 first"
        ways.append(
            f"load the weights in bf16 (--dtype bf16 with --pretrained or --weights, dtype='bf16': {bf16}{later})"
        )
    ways.append(
        "a smaller configuration or a machine with more memory; to fine-tune it, vitzoo finetune --fsdp shards it across processes"
    )
    require_memory(
        model_bytes(meta, dtype),
        f"model {name!r} in {name_of(built)} ({count:,} parameters, the weights alone)",
        "ways out: " + ", ".join(ways),
    )


def _build_pretrained(
    entry: registry.ModelEntry,
    source: Source,
    base_cfg: PretrainedCfg | None,
    overrides: dict[str, Any],
    dtype: torch.dtype | None = None,
    tag: str | None = None,
    open_clip: bool = False,
) -> nn.Module:
    """`entry.builder(**overrides)` on the meta device, filled from `source` (`open_clip`: the
    image tower of an open_clip-layout source). The checkpoint decides
    what `overrides` leave open (weights.build_args); `base_cfg` is the preprocessing the source's
    own config refines. With a weights `tag`, `base_cfg` is that tag's: its `model_args` say what
    these weights need beyond the architecture (a checkpoint that shows otherwise is refused), and
    its preprocessing is these weights' even when `source` is another copy of them. The entry's
    name is recorded for save_pretrained.
    With `dtype`, each checkpoint tensor is converted to it as it is loaded (none when the file
    already holds it): the model never exists in fp32, so a 7B model in bf16 loads in its bf16
    size (benchmarks/load.py --dinov3-7b measures it)."""
    if open_clip:
        from .text.load import read_open_clip_tower  # text/ sits beside the builder, which calls into it

        ckpt = read_open_clip_tower(source)
    else:
        ckpt = _read(source)[0]
    carried = build_args(ckpt, overrides)
    named = {k: v for k, v in (base_cfg.model_args if base_cfg else {}).items() if k not in overrides}
    carried.update(named)
    with torch.device("meta"):
        model = entry.builder(**overrides, **carried)
    if tag is not None:
        check_named_args(model, ckpt, named, f"{entry.name}.{tag}")
    _fill(model, ckpt, dtype)
    attach_pretrained_cfg(model, pretrained_cfg_for(ckpt, model, base_cfg, describes=True if tag is not None else None))
    name_model(model, entry.name)
    return model


def _fill(model: nn.Module, ckpt: Checkpoint, dtype: torch.dtype | None) -> None:
    """Load `ckpt` into `model`, built on the meta device; with `dtype`, each tensor converted as
    it loads, after cast_model's refusal (check_castable) of a value beyond that dtype's range."""
    if dtype is not None:
        check_castable(ckpt.state.items(), dtype)
    load_checkpoint(model, ckpt, strict=True, assign=True, dtype=dtype)


def load_weights(model: nn.Module, source: Source, *, strict: bool = True) -> FitReport:
    """Load `source` (file, directory, "hf-hub:org/repo[@rev]" or "timm:<name>") into `model`.

    The checkpoint is adapted to the model where that is well defined (num_classes, img_size,
    in_chans, each logged; see vitzoo/weights/adapt.py); anything else that does not fit raises a
    WeightsMismatchError. A source that states a LayerNorm eps (transformers: 1e-12) sets it on
    the model and in `model.config`. A model that carries a pretrained cfg gets these weights'
    preprocessing and labels. strict=False loads the keys that fit and reports the rest in the
    returned FitReport."""
    ckpt, _ = _read(source)
    report = load_checkpoint(model, ckpt, strict=strict)
    pcfg = pretrained_cfg_of(model)
    if pcfg is not None:  # its cfg described other weights (or none): these weights' own cfg refines it
        attach_pretrained_cfg(model, pretrained_cfg_for(ckpt, model, pcfg.replace(source=None, tag=None)))
    return report


def from_pretrained(source: Source, dtype: str | torch.dtype | None = None) -> nn.Module:
    """A model rebuilt from a saved directory (vitzoo, transformers or timm layout), a file whose
    layout names the architecture, or "hf-hub:org/repo[@rev]"; the config comes from the source
    (and, for a named architecture, from what the registry says of it). `dtype` as in `create`:
    each tensor converted as it loads, refused where a weight is beyond that precision's range."""
    torch_dtype = parse_dtype(dtype, "cpu")[0] if dtype is not None else None
    ckpt, arch = _read(source)
    with torch.device("meta"):
        model = VisionTransformer(vit_config(ckpt))
    _fill(model, ckpt, torch_dtype)
    if torch_dtype is not None:
        cast_model(model, torch_dtype)  # the buffers loading rebuilt in fp32
    if ckpt.architecture:
        name_model(model, ckpt.architecture)
    attach_pretrained_cfg(model, pretrained_cfg_for(ckpt, model, arch.default_cfg if arch is not None else None))
    return model


def download(name_or_source: str) -> list[Path]:
    """Fetch a model's weights into the Hugging Face cache ahead of time (for offline use later)
    and return the cached files. Takes a registered name in any spelling ("vit_b16",
    "vit_b16.augreg_in21k_ft_in1k", timm's "vit_base_patch16_224.augreg_in21k_ft_in1k"),
    "hf-hub:org/repo[@rev]" or "timm:<timm name>"."""
    source, _ = _weights_source(name_or_source)
    if source.startswith(HF_PREFIX) or source.startswith(TIMM_PREFIX):
        return fetch_source(source)
    path = Path(source)
    if not path.exists():
        raise WeightsNotFoundError(f"{name_or_source!r}: its weights source {source!r} does not exist")
    return [path]


def weights_size(name_or_source: str) -> StoredSize:
    """How large a release's weights are as its Hub repository stores them (bytes, and the files
    counted), asked of the Hub without downloading them, or read off the local cache
    (vitzoo/weights/hub_sizes.py). Takes what `download` takes; a local source is sized on disk."""
    source, kind = _weights_source(name_or_source)
    if source.startswith(TIMM_PREFIX):
        return stored_size(timm_hub_ref(source[len(TIMM_PREFIX) :]))
    if source.startswith(HF_PREFIX):
        names = WEIGHT_FILES
        if kind == "open_clip":
            from .text.load import OPEN_CLIP_WEIGHTS  # text/ sits beside the builder, which calls into it

            names = OPEN_CLIP_WEIGHTS
        return stored_size(parse_hub_ref(source), names)
    path = Path(source)
    if not path.is_file():
        raise WeightsNotFoundError(f"{name_or_source!r}: its weights source {source!r} is no file")
    files = [f for f in weight_files(path) if not is_index(f.name)]
    return StoredSize(sum(f.stat().st_size for f in files), tuple(f.name for f in files), source)


def _weights_source(name_or_source: str) -> tuple[str, str | None]:
    """A registered name's weights source ("hf-hub:...", "timm:..." or a path) and whose layout its
    files are in (`Resolved.source_kind`); a source as given, its layout unknown (None)."""
    if name_or_source.startswith(HF_PREFIX) or name_or_source.startswith(TIMM_PREFIX):
        return name_or_source, None
    resolved = registry.resolve(name_or_source)
    if resolved.source is None:
        raise WeightsError(f"model {resolved.entry.name!r} has no pretrained weights to download")
    return resolved.source, resolved.source_kind


def convert(src: Source, dst: Source, *, to: str = "vitzoo", model: str | nn.Module | None = None) -> Path:
    """Read `src` (any source load_weights takes) and write it to `dst` in vitzoo's layout
    (a directory; or a single file if `dst` ends in .safetensors) or as a timm safetensors file.

    `model` names the architecture (a registered name, e.g. "vit_b16") when the source does not
    state it (a bare weights file); it may also change num_classes/img_size via adaptation by
    passing a model instance already built as wanted."""
    if to not in EXPORT_FORMATS:
        raise ValueError(f"convert: unknown target format to={to!r}; expected one of {', '.join(EXPORT_FORMATS)}")
    dst = Path(dst)
    if to == "timm":
        written = [dst if dst.suffix == ".safetensors" else dst / "model.safetensors"]
    else:
        written = [dst] if dst.suffix == ".safetensors" else [dst / WEIGHTS_NAME, dst / CONFIG_NAME]
    _check_not_overwriting(src, dst, written)
    if model is None:
        built = from_pretrained(src)
    elif isinstance(model, str):
        built = create(model, weights=src)
    elif isinstance(model, nn.Module):
        load_weights(model, src)
        built = model
    else:
        raise TypeError(f"convert: model must be None, a registered name or an nn.Module, got {type(model).__name__}")
    if to == "timm":
        return export(built, "timm", written[0])
    if dst.suffix == ".safetensors":
        return write_safetensors(dst, built.state_dict(), metadata={"format": "pt"})
    return save_pretrained(built, dst)


def _check_not_overwriting(src: Source, dst: Path, written: list[Path]) -> None:
    """Refuse (ValueError naming both) an output that is the input, that would replace one of the
    input's files, or a directory that holds the input file (its config.json may be the input's own)."""
    if isinstance(src, str) and (src.startswith(HF_PREFIX) or src.startswith(TIMM_PREFIX)):
        return
    source = Path(src).resolve()
    if not source.exists():
        return  # the read names the missing source
    inputs = {p.resolve() for p in source.iterdir() if p.is_file()} if source.is_dir() else {source}
    target = dst.resolve()
    clash = (
        target == source
        or any(p.resolve() in inputs for p in written)
        or (source.is_file() and dst.suffix != ".safetensors" and source.parent == target)
    )
    if clash:
        raise ValueError(
            f"convert: the output {str(dst)!r} would overwrite the input {str(src)!r} (or files next to it); "
            "expected an output outside the input, such as a new directory"
        )
