"""SAM 3's image encoder trunk (transformers' Sam3ViTModel) from transformers' own layouts: the trunk
alone, Sam3VisionModel (its FPN neck left out), the whole Sam3Model and Sam3VideoModel, each built
by transformers at reduced depth and width with random weights and read by vitzoo, which computes
the backbone's last_hidden_state; the release registered as `sam3_vit_l14.fb` (facebook/sam3) loads
under its name from a fake Hub; what vitzoo cannot build is refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_dinov3 import max_diff, randomise

import vitzoo
from vitzoo import registry
from vitzoo.licenses import license_flags
from vitzoo.model import ViTConfig
from vitzoo.weights.errors import WeightsFileError

ATOL = 1e-6  # measured: 0.0 (fp32, CPU)
# 80 px in patches of 8: a 10 x 10 grid, windows of 4 (the grid padded to 12 x 12), block 1 global
# (its positions scaled by 4 / 10); the 5 x 5 table of pretrain_image_size 40 tiled to the grid.
VIT = dict(
    model_type="sam3_vit_model", hidden_size=64, intermediate_size=100, num_hidden_layers=3, num_attention_heads=2,
    image_size=80, patch_size=8, window_size=4, global_attn_indexes=[1], pretrain_image_size=40,
)  # fmt: skip
SMALL = dict(hidden_size=32, num_layers=1, intermediate_size=37, num_attention_heads=2)
DETECTOR = dict(
    vision_config=dict(backbone_config=VIT, fpn_hidden_size=32),
    text_config=dict(
        hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2, projection_dim=32
    ),
    geometry_encoder_config=SMALL,
    detr_encoder_config=SMALL,
    detr_decoder_config=dict(SMALL, num_queries=4),
    mask_decoder_config=dict(hidden_size=32, num_attention_heads=2),
)
TRUNK = dict(embed_dim=64, depth=3, num_heads=2, mlp_ratio=100 / 64, img_size=80, patch_size=8, window_size=4)


def _hf(name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name} (SAM 3)")
    return getattr(transformers, name)


def _reference(kind: str) -> tuple[torch.nn.Module, Any]:
    """transformers' model of `kind` and the function giving its trunk's last_hidden_state."""
    if kind == "vit":
        model = _hf("Sam3ViTModel")(_hf("Sam3ViTConfig")(**{k: v for k, v in VIT.items() if k != "model_type"}))
        return model, lambda x: model(x).last_hidden_state
    if kind == "vision":
        config = _hf("Sam3VisionConfig")(backbone_config=VIT, fpn_hidden_size=32)
        model = _hf("Sam3VisionModel")(config)
        return model, lambda x: model(x).last_hidden_state
    if kind == "whole":
        model = _hf("Sam3Model")(_hf("Sam3Config")(**DETECTOR))
        return model, lambda x: model.get_vision_features(pixel_values=x).last_hidden_state
    tracker = dict(memory_attention_num_layers=1, memory_fuser_num_layers=1)
    model = _hf("Sam3VideoModel")(_hf("Sam3VideoConfig")(detector_config=DETECTOR, tracker_config=tracker))
    return model, lambda x: model.detector_model.get_vision_features(pixel_values=x).last_hidden_state


def _saved(tmp_path: Path, kind: str) -> tuple[Path, Any]:
    model, trunk = _reference(kind)
    randomise(model, 3)
    model.save_pretrained(tmp_path / kind)
    return tmp_path / kind, trunk


@pytest.mark.parametrize(
    "kind", ["vit", "vision", "whole", pytest.param("video", marks=pytest.mark.slow)]
)  # fmt: skip
def test_trunk_from_transformers_layouts_computes_last_hidden_state(tmp_path, kind):
    directory, trunk = _saved(tmp_path, kind)
    ours = vitzoo.from_pretrained(directory).eval()
    c = ours.config
    assert (c.window_size, c.global_attn_indexes, c.window_rope, c.rope_temperature) == (4, (1,), True, 10000.0)
    assert (c.img_size, c.class_token, c.pre_norm, c.patch_bias, c.final_norm, c.norm_eps) == (
        80, False, True, False, False, 1e-6,
    )  # fmt: skip
    assert ours.pos_embed is not None and ours.pos_embed.shape == (1, 100, 64)  # the 5 x 5 table tiled
    x = torch.randn(2, 3, 80, 80, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert max_diff(ours.forward_features(x), trunk(x)) <= ATOL


def test_another_size_is_transformers_model_built_for_it(tmp_path):
    """transformers computes SAM 3 only at its config's image_size (the global blocks' positions are
    fixed at build): a Sam3ViTModel built for 120 px with the same weights is the reference there.
    vitzoo built for 120 tiles the released table at load; the model built for 80 follows by
    set_input_size and dense_features, tiling its own 10 x 10 table (a multiple of the 5 x 5)."""
    directory, _ = _saved(tmp_path, "vit")
    vit = {k: v for k, v in VIT.items() if k != "model_type"}
    reference = _hf("Sam3ViTModel")(_hf("Sam3ViTConfig")(**{**vit, "image_size": 120})).eval()
    reference.load_state_dict(load_file(directory / "model.safetensors"))
    x = torch.randn(1, 3, 120, 120, generator=torch.Generator().manual_seed(3))
    weights = directory / "model.safetensors"
    with torch.no_grad():
        expected = reference(x).last_hidden_state
        built = vitzoo.create("sam3_vit_l14", weights=weights, **{**TRUNK, "img_size": 120}, global_attn_indexes=(1,))
        assert max_diff(built.eval().forward_features(x), expected) <= ATOL
        ours = vitzoo.from_pretrained(directory).eval()
        dense = vitzoo.dense_features(ours, x)  # (B, D, rows, columns)
        assert max_diff(dense.flatten(2).transpose(1, 2), expected) <= ATOL
        ours.set_input_size(img_size=120)
        assert max_diff(ours.forward_features(x), expected) <= ATOL


def test_release_is_registered_by_name_with_its_licence():
    entry, cfg = registry.get_pretrained_cfg("sam3_vit_l14.fb")
    assert cfg is not None and cfg.source == "hf-hub:facebook/sam3" and cfg.license == "sam-license"
    assert license_flags(cfg.license) == ("unreviewed", "gated")
    config = entry.resolve_config()
    assert (config.embed_dim, config.depth, config.num_heads, config.img_size, config.patch_size) == (
        1024,
        32,
        16,
        1008,
        14,
    )
    assert (config.window_size, config.global_attn_indexes, config.window_rope) == (24, (7, 15, 23, 31), True)
    assert config.mlp_ratio * config.embed_dim == 4736
    transformers = pytest.importorskip("transformers")
    if hasattr(transformers, "Sam3ViTConfig"):  # the registered fields are transformers' defaults (facebook/sam3's)
        from vitzoo.weights.transformers_files import transformers_config

        default = transformers.Sam3Config().to_dict()
        fields = transformers_config(default, Path("config.json"))
        for name in ("embed_dim", "depth", "num_heads", "patch_size", "window_size", "global_attn_indexes"):
            assert fields[name] == getattr(config, name), name


def test_hub_release_loads_under_its_name(tmp_path, fake_hub, hf_cache):
    directory, trunk = _saved(tmp_path, "whole")
    fake_hub.publish_dir("facebook/sam3", directory)
    x = torch.randn(1, 3, 80, 80, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        named = vitzoo.create("sam3_vit_l14.fb", **TRUNK, global_attn_indexes=(1,)).eval()
        assert max_diff(named.forward_features(x), trunk(x)) <= ATOL


def test_what_vitzoo_cannot_build_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="window_rope=True with window_size=0"):
        ViTConfig(class_token=False, global_pool="avg", window_rope=True)
    with pytest.raises(ValueError, match=r"window_rope=True with .*use_rel_pos=True"):
        ViTConfig(class_token=False, global_pool="avg", window_size=7, use_rel_pos=True, window_rope=True)
    directory, trunk = _saved(tmp_path, "vit")
    # the tensors alone show neither the heads nor the windows: without its config.json the
    # checkpoint is refused, and read under the registered name (the architecture named there)
    alone = tmp_path / "alone"
    alone.mkdir()
    save_file(load_file(directory / "model.safetensors"), alone / "model.safetensors")
    with pytest.raises(ValueError, match="attention heads is not stated"):
        vitzoo.from_pretrained(alone)
    named = vitzoo.create("sam3_vit_l14", weights=alone / "model.safetensors", **TRUNK, global_attn_indexes=(1,))
    x = torch.randn(1, 3, 80, 80, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert max_diff(named.eval().forward_features(x), trunk(x)) <= ATOL
    config = json.loads((directory / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsFileError, match="rope_type='default' is not supported"):
        vitzoo.from_pretrained(directory)
    config.update(rope_parameters=None, image_size=[80, 96])
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsFileError, match=r"image_size=\[80, 96\] is not supported; expected a square"):
        vitzoo.from_pretrained(directory)


def test_config_defaults_are_sam3vitconfigs_own():
    from vitzoo.weights.transformers_files import FAMILIES

    defaults = _hf("Sam3ViTConfig")().to_dict()
    ours = dict(FAMILIES["sam3_vit_model"].defaults)
    # no qkv_bias key (its q/k/v are always biased); rope_theta is read from rope_parameters
    assert set(ours) - set(defaults) == {"qkv_bias", "rope_theta"} and ours.pop("qkv_bias") is True
    assert ours.pop("rope_theta") == defaults["rope_parameters"]["rope_theta"]
    ours.pop("rope_parameters")
    assert {k: defaults[k] for k in ours} == ours
