"""Whole image-text models from their checkpoints, and the tokenizers that go with them.

    create_image_text("clip_b16")                          random weights, CLIP's text tower
    create_image_text("clip_b16", pretrained=True)         the name's default source (timm's hub repo)
    read_image_text("hf-hub:timm/ViT-B-16-SigLIP")         the source names the architecture
    get_tokenizer("clip_b16") / get_tokenizer("some/dir")  strings -> LongTensor of ids

A source is a directory or "hf-hub:org/repo[@rev]" in one of two layouts:
    open_clip      open_clip_config.json + open_clip_model.safetensors (open_clip's hub repos, and
                   timm's CLIP / SigLIP repos, which hold these files beside timm's own)
    transformers   config.json of a CLIPModel / SiglipModel / Siglip2Model + model.safetensors
                   (the vision tower is read by vitzoo.weights, the text tower here)
Either may be sharded (`*.safetensors.index.json` and the shards it names; vitzoo/weight_shards.py).
"timm:<name>" means timm's hub repo of that name, read in the open_clip layout.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import registry
from ..model import VisionTransformer, ViTConfig
from ..pretrained_cfg import PretrainedCfg, attach_pretrained_cfg
from ..weight_shards import index_name
from ..weights import WeightsError, WeightsNotFoundError, load_checkpoint, read_source, vit_config
from ..weights.checkpoint import Checkpoint
from ..weights.errors import WeightsFileError, WeightsMismatchError
from ..weights.files import StateDict, read_checkpoint, read_json, read_shapes
from ..weights.hub import (
    HF_PREFIX,
    PREPROCESSOR_FILE,
    TIMM_PREFIX,
    WEIGHT_FILES,
    HubRef,
    hub_file,
    parse_hub_ref,
    timm_hub_ref,
)
from ..weights.norm_eps import NORM_EPS
from ..weights.shapes import infer_config_fields
from ..weights.verify import check_shown, check_stated
from .bpe import ClipTokenizer, clip_tokenizer
from .keymaps import split_open_clip, split_transformers_text
from .model import ImageTextModel, Tokenizer
from .open_clip_config import ImageTower, OpenClipConfig, parse_image_tower, parse_open_clip_config
from .spm import SentencePieceTokenizer, sentencepiece_tokenizer
from .transformer import SHOWN_BY, TextConfig, TextTransformer, implied_fields, shown_fields
from .transformers_config import transformers_text_config, transformers_text_says

Source = str | os.PathLike[str]
OPEN_CLIP_CONFIG = "open_clip_config.json"
# In order of preference, as vitzoo.weights looks for its own (an index stands for its shards).
OPEN_CLIP_WEIGHTS = (
    "open_clip_model.safetensors",
    index_name("open_clip_model.safetensors"),
    "open_clip_pytorch_model.bin",
)
TRANSFORMERS_WEIGHTS = WEIGHT_FILES

CLIP_LOGIT_SCALE = math.log(1 / 0.07)  # CLIP's initial temperature
SIGLIP_LOGIT_SCALE, SIGLIP_LOGIT_BIAS = math.log(10.0), -10.0
# The text towers of the registered image towers, for models built without weights.
TEXT_CONFIGS: dict[str, TextConfig] = {
    "clip_b16": TextConfig(act_layer="quick_gelu"),
    "siglip_b16": TextConfig(
        vocab_size=32000,
        context_length=64,
        width=768,
        num_heads=12,
        embed_dim=768,
        norm_eps=NORM_EPS["siglip_text"],
        causal=False,
        pool="last",
        proj_bias=True,
    ),
    # PE-Core (open_clip's PE-Core-* configs): CLIP's tower with GELU at a context of 32.
    **{
        f"pe_core_{size}": TextConfig(context_length=32, width=w, depth=d, num_heads=h, embed_dim=w)
        for size, w, d, h in (("t", 512, 12, 8), ("s", 512, 12, 8), ("b", 1024, 24, 16), ("l", 1024, 24, 16))
    },
}


# Image-text sources of registered weights whose registered source is their image tower alone:
# timm keeps SigLIP's open_clip files in a repo of open_clip's name.
# The same for PE-Core, whose whole models are open_clip's hub repos (timm's hold the image tower).
TEXT_SOURCES: dict[str, str] = {
    "siglip_b16.webli": "hf-hub:timm/ViT-B-16-SigLIP",
    "pe_core_t.fb": "hf-hub:timm/PE-Core-T-16-384",
    "pe_core_s.fb": "hf-hub:timm/PE-Core-S-16-384",
    "pe_core_b.fb": "hf-hub:timm/PE-Core-B-16",
    "pe_core_l.fb": "hf-hub:timm/PE-Core-L-14-336",
}


def _text_source(name: str | registry.Resolved) -> str:
    """The image-text source of a registered name (with or without tag): TEXT_SOURCES, else the
    registered source (timm's CLIP repos hold open_clip's files beside timm's)."""
    resolved = registry.as_resolved(name)
    entry, pcfg = resolved.entry, resolved.pretrained_cfg
    if pcfg is None or pcfg.source is None:
        raise WeightsError(f"model {entry.name!r} has no pretrained weights registered; pass weights=<source>")
    return TEXT_SOURCES.get(f"{entry.name}.{pcfg.tag}", pcfg.source)


@dataclass
class Files:
    """A local directory or a hub repo, asked for one file at a time."""

    label: str
    directory: Path | None = None
    ref: HubRef | None = None
    fetched: dict[str, Path] = field(default_factory=dict)

    def get(self, name: str, *, optional: bool = False, tried: tuple[str, ...] = ()) -> Path | None:
        if self.ref is not None:
            path = hub_file(self.ref, name, optional=optional, tried=tried)
        else:
            assert self.directory is not None
            path = self.directory / name
            if not path.is_file():
                if optional:
                    return None
                nor = f" (nor {', '.join(map(repr, tried))})" if tried else ""
                raise WeightsNotFoundError(f"directory {self.label!r} has no file {name!r}{nor}")
        if path is not None:
            self.fetched[name] = path
        return path

    def first(self, names: tuple[str, ...]) -> Path:
        for i, name in enumerate(names):
            last = i == len(names) - 1
            path = self.get(name, optional=not last, tried=names[:i] if last else ())
            if path is not None:
                return path
        raise AssertionError("unreachable: the last name returns a path or raises")


def open_files(source: Source) -> Files:
    if isinstance(source, str) and source.startswith(HF_PREFIX):
        ref = parse_hub_ref(source)
        return Files(str(ref), ref=ref)
    if isinstance(source, str) and source.startswith(TIMM_PREFIX):
        ref = timm_hub_ref(source[len(TIMM_PREFIX) :])
        return Files(str(ref), ref=ref)
    path = Path(source)
    if not path.is_dir():
        raise WeightsNotFoundError(
            f"image-text source {str(source)!r} is neither a directory nor 'hf-hub:org/repo[@rev]' nor 'timm:<name>'"
        )
    return Files(str(path), directory=path)


def read_image_text(source: Source) -> ImageTextModel:
    """The whole model a source holds (see the module docstring), with its tokenizer attached."""
    files = open_files(source)
    oc_config = files.get(OPEN_CLIP_CONFIG, optional=True)
    if oc_config is not None:
        return _read_open_clip(files, oc_config)
    return _read_transformers(files, source)


def _read_open_clip(files: Files, config_path: Path) -> ImageTextModel:
    cfg = parse_open_clip_config(read_json(config_path), str(config_path))
    weights = files.first(OPEN_CLIP_WEIGHTS)
    _check_open_clip(cfg, str(config_path), weights)
    tokenizer = tokenizer_for(files, cfg.tokenizer, cfg.text, config=str(config_path), lazy=True)
    split = split_open_clip(read_checkpoint(weights), file=str(weights), fc_norm=cfg.fc_norm)
    visual = _open_clip_visual(cfg, split.visual, str(weights))
    text = TextTransformer(cfg.text)
    _load(text, split.text, str(weights), "text tower")
    model = ImageTextModel(
        visual,
        text,
        logit_scale=_scalar(split.logit_scale, "logit_scale", str(weights)) or CLIP_LOGIT_SCALE,
        logit_bias=_scalar(split.logit_bias, "logit_bias", str(weights)),
        tokenizer=tokenizer,
    )
    attach_pretrained_cfg(visual, cfg.preprocessing(visual.config, files.label))
    return model


def read_open_clip_tower(source: Source) -> Checkpoint:
    """The image tower alone of an open_clip-layout source (open_clip_config.json beside its
    weights), as a Checkpoint in vitzoo's names whose config is the tower's: what `create(name,
    pretrained=True)` loads for an open_clip release (its text tower, even one vitzoo does not
    read, is neither built nor checked)."""
    files = open_files(source)
    config_path = files.get(OPEN_CLIP_CONFIG)
    assert config_path is not None  # not optional: a missing file raised
    tower = parse_image_tower(read_json(config_path), str(config_path))
    weights = files.first(OPEN_CLIP_WEIGHTS)
    fc_norm = bool(tower.vision_fields.get("fc_norm", False))
    visual = {k: v for k, v in read_checkpoint(weights).items() if k.startswith("visual.")}  # no text keys checked
    state = split_open_clip(visual, file=str(weights), fc_norm=fc_norm).visual
    fields = _tower_config(tower, state, str(weights)).to_dict()
    return Checkpoint(state, str(weights), "vitzoo", fields, set(fields))


def _check_open_clip(cfg: OpenClipConfig, config: str, weights: Path) -> None:
    """Both towers of an open_clip config against the shapes of the tensors in `weights` (its
    header alone, for safetensors), before anything is built or loaded from it: a size the tensors
    do not have is named with its field and tensor (weights/verify.py), not allocated."""
    shapes = split_open_clip(read_shapes(weights), file=str(weights), fc_norm=cfg.fc_norm)
    inferred = infer_config_fields(shapes.visual, file=str(weights))
    check_stated(cfg.vision_fields, inferred, shapes.visual, config=config, weights=str(weights))
    _check_text(cfg.text, cfg.text_says, shapes.text, config=config, weights=str(weights))


def _check_text(text: TextConfig, says: dict[str, str], shapes: StateDict, *, config: str, weights: str) -> None:
    """The text tower a config builds against its tensors' shapes (vitzoo's names)."""
    check_shown(implied_fields(text), shown_fields(shapes), SHOWN_BY, config=config, weights=weights, says=says)


def image_tower_config(
    tower: ImageTower | OpenClipConfig, where: str, sizes: dict[str, Any] | None = None
) -> ViTConfig:
    """The ViTConfig of an open_clip image tower: its own fields, or for a timm tower timm's
    architecture of that name as the registry holds it (`registry.timm_architecture_config`: open_clip
    builds timm's model, whose GELU its quick_gelu option does not reach) at `sizes` (the widths and
    depth its tensors show; the head count and the options are the architecture's) with the fields
    open_clip's config sets."""
    if tower.timm_name is None:
        return ViTConfig(**tower.vision_fields)
    config = registry.timm_architecture_config(tower.timm_name)
    if config is None:
        raise WeightsMismatchError(
            f"{where}: the image tower is timm's {tower.timm_name!r}, which no registered vitzoo model matches"
        )
    return config.replace(**(sizes or {}), **tower.vision_fields)


def _open_clip_visual(cfg: OpenClipConfig, state: dict[str, torch.Tensor], where: str) -> VisionTransformer:
    config = _tower_config(cfg, state, where)
    visual = VisionTransformer(config)
    _load(visual, state, where, "image tower")
    return visual


def _tower_config(tower: ImageTower | OpenClipConfig, state: dict[str, torch.Tensor], where: str) -> ViTConfig:
    """The ViTConfig of an open_clip image tower whose tensors (vitzoo's names) are `state`; a timm
    CLIP head's zero bias, which open_clip's projection lacks, is added to `state`."""
    shapes = infer_config_fields(state, file=where) if tower.timm_name is not None else {}
    sizes: dict[str, Any] = {k: shapes[k] for k in ("embed_dim", "depth", "patch_size", "mlp_ratio") if k in shapes}
    config = image_tower_config(tower, where, sizes)
    if "head.weight" in state and config.head_bias and "head.bias" not in state:
        state["head.bias"] = torch.zeros(state["head.weight"].shape[0])  # timm's CLIP head has a zero bias
    return config


def _load(module: torch.nn.Module, state: dict[str, torch.Tensor], where: str, what: str) -> None:
    own = module.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    wrong = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in own.items()
        if k in state and state[k].shape != v.shape
    ]
    if missing or unexpected or wrong:
        parts = [
            f"missing {', '.join(missing[:8])}" if missing else "",
            f"unexpected {', '.join(unexpected[:8])}" if unexpected else "",
            f"shapes (file vs model) {', '.join(wrong[:8])}" if wrong else "",
        ]
        raise WeightsMismatchError(f"{where}: the {what} does not fit its config: {'; '.join(p for p in parts if p)}")
    module.load_state_dict(state, strict=True)


def _scalar(value: torch.Tensor | None, name: str, where: str) -> float | None:
    if value is None:
        return None
    if value.numel() != 1:
        raise WeightsMismatchError(f"{where}: {name} has shape {tuple(value.shape)}; expected a single number")
    return float(value.reshape(()))


def _read_transformers(files: Files, source: Source) -> ImageTextModel:
    config_path = files.get("config.json", tried=(OPEN_CLIP_CONFIG,))
    assert config_path is not None
    cfg = read_json(config_path)
    text_config, tokenizer_spec = transformers_text_config(cfg, str(config_path))
    weights = files.first(TRANSFORMERS_WEIGHTS)
    shapes, _, _ = split_transformers_text(read_shapes(weights), file=str(weights))
    _check_text(text_config, transformers_text_says(cfg), shapes, config=str(config_path), weights=str(weights))
    tokenizer = tokenizer_for(files, tokenizer_spec, text_config, config=str(config_path), lazy=True)
    ckpt = read_source(source if files.ref is None else str(files.ref))
    ckpt.apply_architecture(None)
    visual = VisionTransformer(vit_config(ckpt))
    load_checkpoint(visual, ckpt, strict=True)
    text_state, scale, bias = split_transformers_text(read_checkpoint(weights), file=str(weights))
    text = TextTransformer(text_config)
    _load(text, text_state, str(weights), "text tower")
    if ckpt.pretrained:
        attach_pretrained_cfg(visual, PretrainedCfg().replace(**ckpt.pretrained))
    return ImageTextModel(
        visual,
        text,
        logit_scale=_scalar(scale, "logit_scale", str(weights)) or CLIP_LOGIT_SCALE,
        logit_bias=_scalar(bias, "logit_bias", str(weights)),
        tokenizer=tokenizer,
    )


def create_image_text(name: str, pretrained: bool | None = None, weights: Source | None = None) -> ImageTextModel:
    """`name`'s image tower with its text tower: random (the text tower of TEXT_CONFIGS), or read
    from `weights` / the name's default source (timm's hub repo of that name, open_clip layout)."""
    resolved = registry.resolve(name)
    entry = resolved.entry
    if weights is None and resolved.wants_weights(pretrained):
        weights = _text_source(resolved)
    if weights is not None:
        return read_image_text(weights)
    text_config = TEXT_CONFIGS.get(entry.name)
    if text_config is None:
        known = ", ".join(TEXT_CONFIGS)
        raise ValueError(f"model {entry.name!r} has no text tower; image-text models: {known} (or pass weights=...)")
    visual = entry.builder()
    if not isinstance(visual, VisionTransformer):
        raise ValueError(f"model {entry.name!r} does not build a vitzoo VisionTransformer")
    if entry.default_cfg is not None:
        attach_pretrained_cfg(visual, entry.default_cfg)
    if text_config.causal:
        return ImageTextModel(
            visual, TextTransformer(text_config), tokenizer=clip_tokenizer(text_config.context_length)
        )
    return ImageTextModel(
        visual, TextTransformer(text_config), logit_scale=SIGLIP_LOGIT_SCALE, logit_bias=SIGLIP_LOGIT_BIAS
    )


def tokenizer_for(
    files: Files, spec: dict[str, Any], text: TextConfig, *, config: str, lazy: bool = False
) -> Tokenizer:
    """The tokenizer `spec` describes ({"kind": "clip"}, {"kind": "sentencepiece", ...}, or
    {"kind": "unsupported", "reason": ...}: one vitzoo does not implement, an error when called). A
    vocabulary that is nowhere to be found raises WeightsNotFoundError naming the places and files;
    `lazy`: when the tokenizer is called instead (a model still computes from token ids). A
    tokenizer with more ids than the tower `config` describes has embeddings is refused."""
    tokenizer: ClipTokenizer | SentencePieceTokenizer
    if spec["kind"] == "unsupported":
        error = WeightsFileError(f"{config!r}: {spec['reason']}")
        if lazy:
            return MissingTokenizer(error)
        raise error
    if spec["kind"] == "clip":
        tokenizer = clip_tokenizer(text.context_length)
    else:
        try:
            tokenizer = sentencepiece_tokenizer(files, spec, text, open_files)
        except WeightsNotFoundError as e:
            if not lazy:
                raise
            return MissingTokenizer(e)
    if tokenizer.vocab_size > text.vocab_size:
        # its larger ids would index past the token embeddings, deep inside the text tower's forward
        raise WeightsMismatchError(
            f"{config!r}: the text tower has vocab_size={text.vocab_size}, but its tokenizer, {tokenizer.name}, "
            f"has {tokenizer.vocab_size} ids (0 to {tokenizer.vocab_size - 1}); expected vocab_size of at least "
            f"{tokenizer.vocab_size}, or the tokenizer these weights were trained with beside them"
        )
    return tokenizer


class MissingTokenizer:
    """Raises, when called, why the model has no tokenizer (the model's towers still work on ids)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __call__(self, texts: list[str]) -> torch.Tensor:
        raise self.error


def get_tokenizer(model_name_or_source: str) -> Callable[[list[str]], torch.Tensor]:
    """The tokenizer of a registered name (CLIP's BPE for CLIP models, else its default source's)
    or of a checkpoint directory / hub repo: a callable from strings to a LongTensor of ids. Only
    configuration files are read, never the weights."""
    source: Source = model_name_or_source
    if not model_name_or_source.startswith((HF_PREFIX, TIMM_PREFIX)) and not Path(model_name_or_source).is_dir():
        config = TEXT_CONFIGS.get(registry.get_entry(model_name_or_source).name)
        if config is not None and config.causal:
            return clip_tokenizer(config.context_length)
        source = _text_source(model_name_or_source)
    files = open_files(source)
    oc_config = files.get(OPEN_CLIP_CONFIG, optional=True)
    if oc_config is not None:
        cfg = parse_open_clip_config(read_json(oc_config), str(oc_config))
        return tokenizer_for(files, cfg.tokenizer, cfg.text, config=str(oc_config))
    config_path = files.get("config.json", tried=(OPEN_CLIP_CONFIG,))
    assert config_path is not None
    text_config, spec = transformers_text_config(read_json(config_path), str(config_path))
    return tokenizer_for(files, spec, text_config, config=str(config_path))


def download_image_text(name_or_source: str) -> list[Path]:
    """Fetch what a whole image-text model needs into the hub cache, for later offline use
    (HF_HUB_OFFLINE=1): its config and weights files and its tokenizer's vocabulary. Takes a
    registered name (its image-text source) or "hf-hub:org/repo[@rev]" / "timm:<name>"."""
    source = name_or_source
    if not source.startswith((HF_PREFIX, TIMM_PREFIX)):
        source = _text_source(name_or_source)
    files = open_files(source)
    if files.ref is None:
        raise WeightsNotFoundError(f"{name_or_source!r}: download fetches hub sources; a directory is already local")
    oc_config = files.get(OPEN_CLIP_CONFIG, optional=True)
    if oc_config is not None:
        cfg = parse_open_clip_config(read_json(oc_config), str(oc_config))
        files.first(OPEN_CLIP_WEIGHTS)
        spec, text, config = cfg.tokenizer, cfg.text, str(oc_config)
    else:
        config_path = files.get("config.json", tried=(OPEN_CLIP_CONFIG,))
        assert config_path is not None
        text, spec = transformers_text_config(read_json(config_path), str(config_path))
        config = str(config_path)
        files.first(TRANSFORMERS_WEIGHTS)
        files.get(PREPROCESSOR_FILE, optional=True)
    tokenizer = tokenizer_for(files, spec, text, config=config)
    return [*files.fetched.values(), *getattr(tokenizer, "files", [])]
