"""vitzoo/pretrained_cfg.py: the preprocessing that travels with weights, readable by timm's helpers."""

from __future__ import annotations

import sys

import pytest
from torchvision.models import ResNet50_Weights

import vitzoo
from vitzoo import pretrained_cfg
from vitzoo.pretrained_cfg import PretrainedCfg

timm_data = pytest.importorskip("timm.data")


def test_timm_resolves_a_vitzoo_models_data_config():
    model = vitzoo.create("deit_s16")
    config = timm_data.resolve_model_data_config(model)
    cfg = model.pretrained_cfg
    assert config == {
        "input_size": cfg.input_size,
        "interpolation": cfg.interpolation,
        "mean": cfg.mean,
        "std": cfg.std,
        "crop_pct": cfg.crop_pct,
        "crop_mode": cfg.crop_mode,
    }


def test_read_access_by_key_knows_only_the_fields():
    cfg = PretrainedCfg(crop_mode="squash")
    assert cfg["crop_mode"] == "squash" and cfg.get("crop_pct") == 0.9
    assert cfg.get("test_input_size") is None and cfg.get("nope", 5) == 5
    with pytest.raises(KeyError):
        cfg["nope"]


def test_imagenet_1k_names_come_from_torchvisions_public_weights_metadata(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision.models._meta", None)  # private: not to be imported
    pretrained_cfg._label_set_names.cache_clear()
    try:
        names = pretrained_cfg.resolve_label_names(PretrainedCfg(label_set="imagenet-1k"))
    finally:
        pretrained_cfg._label_set_names.cache_clear()
    assert names == tuple(ResNet50_Weights.DEFAULT.meta["categories"])
    assert names is not None and len(names) == 1000 and names[0] == "tench"


def test_crop_mode_is_checked():
    assert PretrainedCfg.from_dict({"crop_mode": "squash"}).crop_mode == "squash"
    with pytest.raises(ValueError, match=r"crop_mode='border' is invalid; expected one of 'center', 'squash'"):
        PretrainedCfg.from_dict({"crop_mode": "border"})


def test_label_names_are_one_per_class():
    assert PretrainedCfg.from_dict({"num_classes": 2, "label_names": ["a", "b"]}).label_names == ("a", "b")
    with pytest.raises(ValueError, match=r"label_names=.* is invalid; expected one name per class: num_classes=10, 3"):
        PretrainedCfg.from_dict({"num_classes": 10, "label_names": ["a", "b", "c"]})
    with pytest.raises(TypeError, match=r"label_names=\('a', None\) is invalid; expected a list of strings"):
        PretrainedCfg.from_dict({"num_classes": 2, "label_names": ["a", None]})
