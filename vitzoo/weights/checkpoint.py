"""A read weights source, as plain data: `Checkpoint` (the tensors in vitzoo's names and what the
source says about them) and `Architecture` (what a name the source states means).

The flow runs one way. sources.py reads a source into a Checkpoint without knowing any registry;
when the source names its architecture (`Checkpoint.names`: vitzoo's or timm's "architecture" in
its config.json), the caller (vitzoo/builder.py) asks its registry what that name means and hands
the answer to `Checkpoint.apply_architecture`; then load.py finishes loading into a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..pretrained_cfg import PretrainedCfg
from .files import StateDict


@dataclass(frozen=True)
class Architecture:
    """What a named architecture means, as the caller's registry knows it."""

    name: str  # the vitzoo name
    config: dict[str, Any] | None  # its ViTConfig fields (None: its builder makes no ViT)
    default_cfg: PretrainedCfg | None  # its preprocessing without weights


# The rotary embedding's settings beyond its kind (a checkpoint's config may state them:
# transformers' DINOv3 rope_theta).
ROPE_SETTINGS = (
    "rope_temperature",
    "rope_grid_indexing",
    "rope_grid_offset",
    "rope_ref_feat_shape",
    "rope_rotate_half",
    "rope_min_period",
    "rope_max_period",
    "rope_normalize_coords",
)
# The rotary embedding, how the attention pool attends and post-norm blocks (the same tensors as
# pre-norm ones): no tensor shows them (bar RoPE-Mixed's frequencies, a parallel block's fused
# projection), so a source states them or its named architecture does, and a checkpoint that
# states them must agree with the model it loads into (verify.check_fits).
UNSHOWN_FIELDS = (
    "rope",
    *ROPE_SETTINGS,
    "attn_pool_num_heads",
    "pool_include_prefix",
    "coca_pool_type",
    "block_type",
)
# What no tensor shows and a named architecture tells: the head count, the LayerNorm eps, the
# pooling, sinusoidal positions (or none), LayerScale's init value, whether any input size is
# taken (timm builds DINOv3 so), whether one past the last whole patch is, and the UNSHOWN_FIELDS. (Not the activation: a timm config names
# the architecture its weights were run with, and the registry may know another tag's; except a
# gated MLP's, see below.)
ARCHITECTURE_FIELDS = (
    "num_heads",
    "norm_eps",
    "global_pool",
    "pos_embed",
    "init_values",
    "dynamic_img_size",
    "pos_resample",  # how the table is resized to another grid (timm's NaFlexVit variants)
    "drop_remainder",  # an input no multiple of the patch (SigLIP So400m/14 at 384)
    *UNSHOWN_FIELDS,
)


@dataclass
class Checkpoint:
    """A loaded source: tensors in our names and what is known about them."""

    state: StateDict
    file: str  # shown in every error message
    format: str  # the key layout the tensors came in
    config: dict[str, Any] = field(default_factory=dict)  # ViTConfig fields the source determines
    # The fields of `config` the source *states* (a config.json, the layout, a named architecture),
    # rather than ones inferred from shapes.
    declared: set[str] = field(default_factory=set)
    pretrained: dict[str, Any] = field(default_factory=dict)  # PretrainedCfg fields the source states
    # PretrainedCfg fields the layout implies where its files state none (torchvision's transform,
    # timm's cfg for Google .npz, the ImageNet label set by class count); see load.pretrained_cfg_for.
    implied: dict[str, Any] = field(default_factory=dict)
    src_grid: tuple[int, int] | None = None  # the checkpoint's patch grid, when its config says
    # The fields of `config` taken from the named architecture (`apply_architecture`), not from the source.
    named: set[str] = field(default_factory=set)
    # The registered vitzoo name of the architecture: as a vitzoo config states it, or a timm
    # config's architecture once `apply_architecture` has been told what the registry calls it.
    architecture: str | None = None
    timm_architecture: str | None = None  # the timm architecture (without tag) a timm config states
    # The model_args that config states: timm builds the architecture with them to check that
    # vitzoo computes it (timm_files.check_timm_architecture).
    timm_model_args: dict[str, Any] = field(default_factory=dict)
    # How a position embedding is resampled to another grid: antialiased bicubic (timm), or plain
    # bicubic where the source's own library resamples so (transformers' Dinov2Model).
    pos_antialias: bool = True
    # "bicubic" (with pos_antialias), "bilinear" (antialiased: transformers' SigLIP 2), "cpe"
    # (RADIO's table of the largest input, cropped: layers.crop_resample_pos_embed) or "tile" (SAM 3's
    # table repeated: layers.tile_pos_embed)
    pos_mode: str = "bicubic"

    @property
    def names(self) -> str | None:
        """The architecture name the source states, for the caller's registry to explain."""
        if self.timm_architecture is not None:
            return self.timm_architecture
        return self.architecture or None

    def apply_architecture(self, arch: Architecture | None) -> None:
        """Take what the caller's registry says `names` means (None: it knows no such name): its
        vitzoo name, and the ARCHITECTURE_FIELDS this source does not state itself."""
        if self.timm_architecture is not None:
            self.architecture = arch.name if arch is not None else None
        if arch is None or arch.config is None:
            return
        for name in ARCHITECTURE_FIELDS:
            if name not in arch.config or name in self.declared:
                continue
            if name == "init_values" and "init_values" not in self.config:
                continue  # no LayerScale in the tensors: the architecture's value would add one
            self.config[name] = arch.config[name]
            self.declared.add(name)
            self.named.add(name)
        # A gated MLP (SwiGLU) shows itself in the tensors, and timm names no variant of these
        # architectures by activation: the registry's gate activation is the weights' one.
        gated = self.config.get("mlp_layer", "mlp") != "mlp" and arch.config.get("mlp_layer", "mlp") != "mlp"
        if gated and "act_layer" not in self.declared and "act_layer" in arch.config:
            self.config["act_layer"] = arch.config["act_layer"]
            self.declared.add("act_layer")
            self.named.add("act_layer")
