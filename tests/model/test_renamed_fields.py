"""Renamed ViTConfig fields (model/fields.py RENAMED_FIELDS; issue 52): SAM's `rel_pos` is
`use_rel_pos`, CoCa's `attn_pool_queries` / `attn_pool_dim` / `attn_pool_type` are `coca_queries` /
`coca_dim` / `coca_pool_type`, and a post-norm block's `init_values` is `postnorm_init`. The old
names are still read (a DeprecationWarning naming both), from a saved config.json and as overrides;
both names at once with different values is one error naming both; files are written in the new."""

from __future__ import annotations

import inspect
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo.model import VisionTransformer, ViTConfig
from vitzoo.model.fields import RENAMED_FIELDS

SAM = dict(class_token=False, global_pool="avg", final_norm=False, window_size=2, neck_chans=16)
COCA = dict(global_pool="coca", attn_pool_num_heads=2, coca_queries=4, coca_dim=16)
TINY = dict(img_size=64, depth=2, embed_dim=32, num_heads=2)
# A registered name of each family whose fields were renamed, at a reduced size, and the renamed
# fields its saved config.json states (new name -> the old one today's main wrote).
FAMILIES = {
    "samvit_b16": (
        {**TINY, "window_size": 2, "global_attn_indexes": (1,), "neck_chans": 16},
        {"use_rel_pos": "rel_pos"},
    ),
    "openclip_coca_vit_b32": (
        {**TINY, "patch_size": 16, "num_classes": 8, "coca_queries": 4, "coca_dim": 16},
        {"coca_queries": "attn_pool_queries", "coca_dim": "attn_pool_dim", "coca_pool_type": "attn_pool_type"},
    ),
    "vit_relpos_medium16_rpn": ({**TINY, "num_classes": 5}, {"postnorm_init": "init_values"}),
}


def _old_keys(directory: Path, renames: dict[str, str]) -> dict[str, Any]:
    """Rewrite the config.json saved in `directory` as a vitzoo before the renames wrote it: each
    renamed field under its old name (a post-norm model's norms' start as init_values)."""
    path = directory / "config.json"
    saved = json.loads(path.read_text())
    config = saved["config"]
    assert set(RENAMED_FIELDS).isdisjoint(config)  # written in the new names alone
    for new, old in renames.items():
        config[old] = config.pop(new)
    path.write_text(json.dumps(saved))
    return config


@pytest.mark.parametrize("name", FAMILIES)
def test_a_config_json_with_the_old_names_loads_to_identical_outputs(name, tmp_path):
    sizes, renames = FAMILIES[name]
    torch.manual_seed(0)
    model = vitzoo.create(name, pretrained=False, **sizes).eval()
    model.save_pretrained(tmp_path)
    old = _old_keys(tmp_path, renames)
    if name == "vit_relpos_medium16_rpn":
        assert old["block_type"] == "postnorm" and old["init_values"] == model.config.postnorm_init is not None
    with pytest.warns(DeprecationWarning) as caught:
        loaded = vitzoo.from_pretrained(tmp_path).eval()
    said = " ".join(str(w.message) for w in caught)
    assert all(repr(old) in said and repr(new) in said for new, old in renames.items())
    assert loaded.config == model.config
    x = torch.randn(2, *model.config.input_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    loaded.save_pretrained(tmp_path / "again")  # saved again: the new names alone
    again = json.loads((tmp_path / "again" / "config.json").read_text())["config"]
    assert set(renames) <= set(again) and set(RENAMED_FIELDS).isdisjoint(again) and again["init_values"] is None


@pytest.mark.parametrize(
    ("old", "new", "fields"),
    [
        ("rel_pos", "use_rel_pos", {**TINY, **SAM}),
        ("attn_pool_queries", "coca_queries", {**TINY, "global_pool": "coca", "attn_pool_num_heads": 2}),
        ("attn_pool_dim", "coca_dim", {**TINY, "global_pool": "coca", "attn_pool_num_heads": 2}),
        ("attn_pool_type", "coca_pool_type", {**TINY, "global_pool": "coca", "attn_pool_num_heads": 2}),
    ],
)
def test_every_door_reads_an_old_name_as_the_new_with_a_warning(old, new, fields):
    value = {"use_rel_pos": True, "coca_queries": 4, "coca_dim": 16, "coca_pool_type": "cascade"}[new]
    assert RENAMED_FIELDS[old] == new
    expected = ViTConfig(**fields, **{new: value})
    message = rf"'{old}' is now '{new}'; {old}={value!r} is read as {new}={value!r}"
    doors = {
        "ViTConfig(...)": lambda: ViTConfig(**fields, **{old: value}),
        "from_dict": lambda: ViTConfig.from_dict({**fields, old: value}),
        "replace": lambda: ViTConfig(**fields).replace(**{old: value}),
        "VisionTransformer": lambda: VisionTransformer(ViTConfig(**fields), **{old: value}).config,
    }
    for door, build in doors.items():
        with pytest.warns(DeprecationWarning, match=message):
            assert build() == expected, door
    assert old not in expected.to_dict() and expected.to_dict()[new] == value


def test_create_reads_an_old_name_as_the_new():
    with pytest.warns(DeprecationWarning, match="'attn_pool_dim' is now 'coca_dim'"):
        model = vitzoo.create("openclip_coca_vit_b32", pretrained=False, **TINY, attn_pool_dim=16, coca_queries=4)
    assert (model.config.coca_dim, model.config.coca_queries) == (16, 4)
    with pytest.warns(DeprecationWarning, match="'rel_pos' is now 'use_rel_pos'"):
        model = vitzoo.create("samvit_b16", pretrained=False, **TINY, window_size=2, neck_chans=16, rel_pos=False)
    assert model.config.use_rel_pos is False


def test_the_warning_points_at_the_callers_line():
    with pytest.warns(DeprecationWarning) as caught:
        ViTConfig.from_dict({**TINY, **SAM, "rel_pos": True})
    assert [Path(w.filename).name for w in caught] == [Path(__file__).name]


def test_an_old_and_a_new_name_at_once_are_one_error_unless_equal():
    fields = {**TINY, "global_pool": "coca", "attn_pool_num_heads": 2}
    both = "attn_pool_dim=16 and coca_dim=32 are both given; attn_pool_dim is coca_dim's old name: give coca_dim alone"
    with pytest.raises(ValueError, match=both):
        ViTConfig.from_dict({**fields, "attn_pool_dim": 16, "coca_dim": 32})
    with pytest.raises(ValueError, match="rel_pos=True and use_rel_pos=False are both given"):
        ViTConfig(**TINY, **SAM).replace(rel_pos=True, use_rel_pos=False)
    with pytest.raises(ValueError, match="attn_pool_queries=4 and coca_queries=8 are both given"):
        vitzoo.create("openclip_coca_vit_b32", pretrained=False, **TINY, attn_pool_queries=4, coca_queries=8)
    with pytest.warns(DeprecationWarning):
        assert ViTConfig.from_dict({**fields, "attn_pool_dim": 16, "coca_dim": 16}).coca_dim == 16
    # an old name overrides what the config holds under the new one (only the overrides are compared)
    with pytest.warns(DeprecationWarning):
        assert ViTConfig(**fields, coca_dim=32).replace(attn_pool_dim=16).coca_dim == 16


def test_init_values_of_a_post_norm_config_is_postnorm_init():
    with pytest.warns(DeprecationWarning, match=r"'init_values' with block_type=\"postnorm\" is now 'postnorm_init'"):
        config = ViTConfig.from_dict({"block_type": "postnorm", "init_values": 1e-6})
    assert (config.postnorm_init, config.init_values) == (1e-6, None)
    with pytest.warns(DeprecationWarning):
        assert ViTConfig(block_type="postnorm").replace(init_values=1e-5).postnorm_init == 1e-5
    with pytest.warns(DeprecationWarning):
        assert VisionTransformer(**TINY, block_type="postnorm", init_values=1e-5).config.postnorm_init == 1e-5
    with pytest.warns(DeprecationWarning):
        model = vitzoo.create("vit_relpos_medium16_rpn", pretrained=False, **TINY, init_values=0.5)
    assert model.config.postnorm_init == 0.5 and model.blocks[0].norm1.weight.eq(0.5).all()
    with pytest.raises(ValueError, match="init_values=1e-06 and postnorm_init=1e-05 are both given"):
        ViTConfig.from_dict({"block_type": "postnorm", "init_values": 1e-6, "postnorm_init": 1e-5})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # LayerScale's init_values of a pre-norm config: no warning
        assert ViTConfig.from_dict({"init_values": 1e-6}).init_values == 1e-6


def test_init_values_and_postnorm_init_each_refuse_the_other_block():
    postnorm = "init_values=1e-05 with block_type='postnorm' is invalid: a post-norm block has no LayerScale; "
    with pytest.raises(ValueError, match=postnorm + r"expected postnorm_init=1e-05 for its norms' initial weight"):
        ViTConfig(block_type="postnorm", init_values=1e-5)
    with pytest.raises(ValueError, match="postnorm_init=1e-05 with block_type='prenorm' is invalid"):
        ViTConfig(postnorm_init=1e-5)
    with pytest.raises(ValueError, match=r"postnorm_init=0\.0 is invalid; expected None or a positive number"):
        ViTConfig(block_type="postnorm", postnorm_init=0.0)
    config = ViTConfig(block_type="postnorm", postnorm_init=1e-5)
    assert config.to_dict()["postnorm_init"] == 1e-5 and config.to_dict()["init_values"] is None


def test_unknown_names_are_still_refused_and_the_signature_is_the_fields():
    with pytest.raises(TypeError, match="unknown config field"):
        ViTConfig().replace(rel_pos_enabled=True)
    with pytest.raises(TypeError, match="rel_pos_enabled"):
        ViTConfig(rel_pos_enabled=True)  # type: ignore[call-arg]
    parameters = inspect.signature(ViTConfig).parameters
    assert list(parameters) == ViTConfig.field_names() and parameters["use_rel_pos"].default is False
