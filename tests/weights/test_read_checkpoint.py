"""vitzoo.weights.checkpoint: reading a source needs no registry. A timm config's architecture is
kept as a name (`Checkpoint.names`) until the caller says what it means; `apply_architecture`
fills only what the source does not state, and `declared` is a plain set of field names."""

from __future__ import annotations

import torch

import vitzoo
from vitzoo.builder import resolve_architecture
from vitzoo.weights import Architecture, read_source


def test_a_timm_layout_names_its_architecture_and_is_explained_by_the_caller(timm_checkpoint):
    ckpt = read_source(timm_checkpoint("vit_tiny_patch16_224", depth=2))
    assert ckpt.names == "vit_tiny_patch16_224" and ckpt.architecture is None
    # timm's config.json states no head count: only the named architecture tells it
    assert isinstance(ckpt.declared, set) and "num_heads" not in ckpt.declared
    arch = resolve_architecture(ckpt.names)
    assert arch is not None and arch.name == "vit_ti16"
    ckpt.apply_architecture(arch)
    assert ckpt.architecture == "vit_ti16"
    assert ckpt.config["num_heads"] == 3 and "num_heads" in ckpt.declared


def test_apply_architecture_keeps_what_the_source_states(tmp_path):
    torch.manual_seed(0)
    vitzoo.VisionTransformer(img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2).save_pretrained(tmp_path)
    ckpt = read_source(tmp_path)
    assert ckpt.names is None and ckpt.config["num_heads"] == 2 and "num_heads" in ckpt.declared
    stated = dict(ckpt.config)
    ckpt.apply_architecture(Architecture("other", dict(num_heads=8, norm_eps=0.5, init_values=0.1), None))
    assert ckpt.config == stated  # a vitzoo config states every field: nothing is replaced or added


def test_an_unknown_timm_architecture_leaves_the_checkpoint_unnamed(timm_checkpoint):
    ckpt = read_source(timm_checkpoint("vit_tiny_patch16_224", depth=2))
    before = dict(ckpt.config)
    ckpt.apply_architecture(None)  # what the builder passes when the registry knows no such name
    assert ckpt.architecture is None and ckpt.config == before
