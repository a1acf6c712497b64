"""vitzoo/features.py: `create(..., features_only=True)` gives timm's FeatureGetterNet for a ViT."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vitzoo
from vitzoo.features import FeatureGetterNet, FeatureInfo, feature_model


def _small(**kwargs):
    torch.manual_seed(0)
    return vitzoo.create("vit_ti16", depth=6, img_size=64, **kwargs)


def test_features_only_gives_the_chosen_block_maps_of_the_same_model():
    full = _small().eval()
    features = _small(features_only=True, out_indices=(1, -2), feature_cls="getter").eval()
    assert isinstance(features, FeatureGetterNet)
    assert features.out_indices == [1, 4] and len(features.model.blocks) == 5  # pruned after the last taken
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        maps = features(x)
        expected = full.forward_intermediates(x, [1, 4], intermediates_only=True)
    assert [tuple(m.shape) for m in maps] == [(2, 192, 4, 4)] * 2
    assert all(torch.equal(a, b) for a, b in zip(maps, expected))
    info = features.feature_info
    assert (info.channels(), info.reduction(), info.module_name()) == ([192, 192], [16, 16], ["blocks.1", "blocks.4"])
    assert info.channels(0) == 192 and len(info) == 2 and info[1]["module"] == "blocks.4"
    assert features.default_cfg["input_size"] == (3, 64, 64) and features.pretrained_cfg.num_classes == 0


def test_default_out_indices_are_the_last_three_blocks_or_fewer():
    assert _small(features_only=True).feature_info.module_name() == ["blocks.3", "blocks.4", "blocks.5"]
    tiny = vitzoo.create("vit_mnist_tiny", depth=2, features_only=True)
    assert tiny.feature_info.module_name() == ["blocks.0", "blocks.1"]


def test_feature_info_matches_timms_for_the_same_choice():
    timm = pytest.importorskip("timm")
    theirs = timm.create_model(
        "vit_tiny_patch16_224", features_only=True, out_indices=(2, 5), feature_cls="getter", depth=6
    )
    ours = vitzoo.create("vit_ti16", depth=6, features_only=True, out_indices=(2, 5), feature_cls="getter")
    assert ours.feature_info.get_dicts() == [
        {k: d[k] for k in ("num_chs", "reduction", "module")} for d in theirs.feature_info.get_dicts()
    ]


def test_bad_feature_arguments_are_named():
    with pytest.raises(ValueError, match="feature_cls='hook' is invalid"):
        _small(features_only=True, feature_cls="hook")
    with pytest.raises(TypeError, match="out_indices and feature_cls need features_only=True"):
        _small(out_indices=2)
    with pytest.raises(ValueError, match="indices=9 is invalid"):
        _small(features_only=True, out_indices=9)
    with pytest.raises(TypeError, match="needs a model with forward_intermediates"):
        feature_model(nn.Linear(2, 2))


def test_feature_info_reads_by_index_list():
    info = FeatureInfo([{"num_chs": 8, "reduction": 4, "module": "a"}, {"num_chs": 16, "reduction": 8, "module": "b"}])
    assert info.channels([1, 0]) == [16, 8] and info.reduction(1) == 8 and info.module_name() == ["a", "b"]
