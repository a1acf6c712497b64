"""The model's parts (vitzoo/model/part.py) against the modules they build, over every registered
architecture: the parameter count by arithmetic equals the built model's, the FLOPs formula equals
torch's counter on one forward (vitzoo.flops' convention: matrix products only, a multiply-add is 2;
element-wise work such as norms, softmax, the rotary embedding and BEiT's table gather is counted by
neither). Each architecture is built on the meta device at its full width and input size, at two
blocks (one of them global in SAM's), so every registered family is counted without allocating it;
identical reduced configs are counted once. Also: each allowed-values tuple agrees with its field's
Literal and words the error; the parts' refusals are what the model and the exporter refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pytest
import torch
from commands.helpers import run

import vitzoo
from vitzoo.deploy import check_dynamic_size
from vitzoo.flops import measure_flops, vit_flops
from vitzoo.layers.activations import ACTIVATIONS
from vitzoo.layers.attn_pooler import COCA_POOL_TYPES
from vitzoo.layers.block import BLOCKS
from vitzoo.layers.hybrid_embed import HYBRID_STEMS
from vitzoo.layers.naflex import POS_RESAMPLE
from vitzoo.layers.norm import NORMS
from vitzoo.layers.qk_norm import QK_NORMS
from vitzoo.layers.rope import GRID_INDEXINGS, NORMALIZE_COORDS, ROPE_KINDS
from vitzoo.layers.swiglu import MLPS
from vitzoo.model import ATTN_LAYERS, GLOBAL_POOLS, PARTS, POS_EMBEDS, VisionTransformer, ViTConfig

MODEL_PACKAGE = Path(vitzoo.__file__).parent / "model"
MAX_MODULE_LINES = 600

# Each field with a fixed set of values: the one tuple that holds them.
CHOICES: dict[str, tuple[str, ...]] = {
    "hybrid_stem": ("", *HYBRID_STEMS),
    "block_type": tuple(BLOCKS),
    "attn_layer": ATTN_LAYERS,
    "qk_norm": QK_NORMS,
    "act_layer": ACTIVATIONS,
    "mlp_layer": MLPS,
    "norm_layer": NORMS,
    "pos_embed": POS_EMBEDS,
    "global_pool": GLOBAL_POOLS,
    "coca_pool_type": COCA_POOL_TYPES,
    "pos_resample": POS_RESAMPLE,
    "rope": ("", *ROPE_KINDS),
    "rope_grid_indexing": GRID_INDEXINGS,
    "rope_normalize_coords": NORMALIZE_COORDS,
}


@pytest.mark.parametrize("field", sorted(CHOICES))
def test_each_literal_agrees_with_its_tuple_and_its_error(field):
    assert get_args(ViTConfig.field_types()[field]) == CHOICES[field]
    with pytest.raises(ValueError) as err:
        ViTConfig(**{field: "bogus"})
    assert f"{field}='bogus' is invalid" in str(err.value)
    assert all(repr(value) in str(err.value) for value in CHOICES[field] if value), str(err.value)


def _reduced(config: dict[str, Any]) -> ViTConfig:
    """Two blocks, the rest as registered; a per-block key/value head count keeps two of its values
    and SAM's global blocks become the second one."""
    full = ViTConfig.from_dict(config)
    changes: dict[str, Any] = {"depth": 2}
    if isinstance(full.num_kv_heads, tuple):
        changes["num_kv_heads"] = (full.num_kv_heads[0], full.num_kv_heads[len(full.num_kv_heads) // 2])
    if full.global_attn_indexes:
        changes["global_attn_indexes"] = (1,)
    return full.replace(**changes)


def _distinct_configs() -> dict[str, ViTConfig]:
    """Every registered name with a config, less those whose reduced config equals an earlier one's."""
    seen: dict[str, tuple[str, ViTConfig]] = {}
    for name in vitzoo.list_models():
        config = vitzoo.model_info(name)["config"]
        if config is not None:
            reduced = _reduced(config)
            seen.setdefault(json.dumps(reduced.to_dict(), sort_keys=True, default=str), (name, reduced))
    return dict(seen.values())


DISTINCT = _distinct_configs()


def _built(config: ViTConfig) -> VisionTransformer:
    with torch.device("meta"):
        model = VisionTransformer(config)
    return model.to("meta")  # the sincos table is computed on the CPU even under a meta context


def _counted(model: VisionTransformer) -> int:
    """torch's counter on one forward at the config's input size, as the model runs it: the fused
    attention kernels counted by their shapes where this torch's counter misses them (count_flops).
    Not under capture_attention: its explicit differential attention multiplies v once by the
    difference of the maps, where the fused path (and the formula) multiplies it by each map."""
    return measure_flops(model, model.config.input_size)


def test_the_distinct_architectures_cover_every_family():
    names = vitzoo.list_models()
    assert len(names) > 250 and len(DISTINCT) > 50
    pools = {c.global_pool for c in DISTINCT.values()}
    assert {"token", "avg", "map", "coca", "aimv2"} <= pools
    assert any(c.window_size for c in DISTINCT.values()) and any(c.hybrid_stem for c in DISTINCT.values())


@pytest.mark.parametrize("name", sorted(DISTINCT))
def test_params_and_flops_equal_the_built_modules(name):
    config = DISTINCT[name]
    model = _built(config)
    assert config.num_params == sum(p.numel() for p in model.parameters()), name
    assert vit_flops(config).total == _counted(model), name


def test_the_parts_add_up_to_the_whole():
    config = DISTINCT[sorted(DISTINCT)[0]]
    assert config.num_params == sum(part.params(config) for part in PARTS)
    assert vit_flops(config).total == sum(sum(part.flops(config).values()) for part in PARTS)


def _coca_names() -> list[str]:
    """One name per distinct CoCa architecture (open_clip's generated releases)."""
    found: dict[str, str] = {}
    for name in vitzoo.list_models():
        config = vitzoo.model_info(name)["config"]
        if config is not None and config.get("global_pool") == "coca":
            found.setdefault(json.dumps(config, sort_keys=True, default=str), name)
    return sorted(found.values())


@pytest.mark.parametrize("name", _coca_names())
def test_info_prints_coca_gflops_equal_to_the_module_count(name, capsys):
    """The whole tower at its full depth: its caption pooler's queries, k/v and projections count."""
    code, out, _ = run(capsys, "info", name, "--json")
    info = json.loads(out)
    counted = _counted(_built(ViTConfig.from_dict(info["config"])))
    assert code == 0 and info["gflops"] == counted / 1e9
    assert vit_flops(ViTConfig.from_dict(info["config"])).pool > 0


@pytest.mark.parametrize("pool_type", ["", "parallel", "cascade"])
def test_each_coca_arrangement_is_counted(pool_type):
    config = ViTConfig(
        img_size=32,
        patch_size=8,
        embed_dim=32,
        depth=1,
        num_heads=2,
        num_classes=6,
        global_pool="coca",
        coca_queries=5,
        coca_dim=24,
        attn_pool_num_heads=2,
        coca_pool_type=pool_type,
        pool_include_prefix=True,
    )
    model = _built(config)
    assert config.num_params == sum(p.numel() for p in model.parameters())
    assert vit_flops(config).total == _counted(model)


def test_refusals_are_the_parts():
    sam = ViTConfig(
        img_size=64, class_token=False, global_pool="avg", window_size=2, use_rel_pos=True, dynamic_img_size=True
    )
    assert "SAM's image encoder" in (sam.refusal("patch_sequence") or "")
    assert VisionTransformer(sam, depth=1, embed_dim=16, num_heads=2).patch_sequence_refusal() == sam.refusal(
        "patch_sequence"
    )
    assert "dynamic_size=True is not available" in (sam.refusal("dynamic_export") or "")
    with pytest.raises(ValueError, match="not available for SAM's image encoder"):
        check_dynamic_size(VisionTransformer(sam, depth=1, embed_dim=16, num_heads=2), True)
    assert "relative position bias MLP" in (ViTConfig(rel_pos_mlp=8).refusal("patch_sequence") or "")
    assert "CNN stem" in (ViTConfig(hybrid_stem="mci").refusal("patch_sequence") or "")
    assert ViTConfig().refusal("patch_sequence") is None and ViTConfig().refusal("dynamic_export") is None


def test_no_module_of_the_model_package_is_longer_than_its_limit():
    lengths = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in MODEL_PACKAGE.glob("*.py")}
    assert {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES} == {}
