"""timm's I-JEPA releases (`vit_huge_patch14_gap_224.in1k_ijepa`, ...): timm fetches their weights from
no Hub repository, so the table points each at the Hub's copy of the same checkpoint in transformers'
`ijepa` layout (facebook/ijepa_*). A tiny IJepaModel published as that repository loads under timm's
name and computes transformers' tokens, timm's pooled feature (the mean of the patch tokens) and timm's
own architecture's output."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_dinov3 import max_diff, randomise

import vitzoo
from vitzoo import registry
from vitzoo.zoo.timm_releases import LEFT_OUT, RELEASES

ATOL = 1e-5
# timm's name -> (vitzoo's name, the Hub repository, patch size, input size)
IJEPA = {
    "vit_huge_patch14_gap_224.in1k_ijepa": ("vit_h14_gap.in1k_ijepa", "facebook/ijepa_vith14_1k", 14, 224),
    "vit_huge_patch14_gap_224.in22k_ijepa": ("vit_h14_gap.in22k_ijepa", "facebook/ijepa_vith14_22k", 14, 224),
    "vit_huge_patch16_gap_448.in1k_ijepa": ("vit_h16_gap_448.in1k_ijepa", "facebook/ijepa_vith16_1k", 16, 448),
    "vit_giant_patch16_gap_224.in22k_ijepa": ("vit_g16_gap.in22k_ijepa", "facebook/ijepa_vitg16_22k", 16, 224),
}
TINY = dict(embed_dim=64, num_heads=4, depth=2)
HF_TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)


def _hf(name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    return getattr(transformers, name)


@pytest.mark.parametrize("timm_name", sorted(IJEPA))
def test_release_is_registered_at_the_hub_copy(timm_name):
    name, repo, _, size = IJEPA[timm_name]
    assert timm_name not in LEFT_OUT
    assert any(f"{row[0]}.{row[1]}" == timm_name and row[9:] == (repo,) for row in RELEASES)
    _, cfg = registry.get_pretrained_cfg(name)
    assert cfg is not None
    assert cfg.source == f"hf-hub:{repo}" and cfg.extra["timm"] == timm_name
    assert (cfg.license, cfg.input_size, cfg.num_classes) == ("cc-by-nc-4.0", (3, size, size), 0)
    config = registry.get_entry(name).resolve_config()
    assert (config.class_token, config.global_pool, config.fc_norm, config.patch_size) == (
        False,
        "avg",
        False,
        IJEPA[timm_name][2],
    )


def test_transformers_checkpoint_loads_under_timms_name(tmp_path, fake_hub, hf_cache):
    """IJepaModel's tokens, their mean as the pooled feature (timm's global_pool='avg', no fc_norm), and
    timm's vit_huge_patch14_gap_224 with the same weights, at depth 2 and width 64, a 4 x 4 grid."""
    name, repo, patch, _ = IJEPA["vit_huge_patch14_gap_224.in1k_ijepa"]
    config = _hf("IJepaConfig")(**HF_TINY, image_size=4 * patch, patch_size=patch)
    hf = randomise(_hf("IJepaModel")(config), 5).eval()
    hf.save_pretrained(tmp_path / "hf")
    fake_hub.publish_dir(repo, tmp_path / "hf")
    x = torch.randn(2, 3, 4 * patch, 4 * patch)
    with torch.no_grad():
        tokens = hf(pixel_values=x).last_hidden_state
        ours = vitzoo.create(name, **TINY, img_size=4 * patch).eval()
        assert max_diff(ours.forward_features(x), tokens) <= ATOL
        assert max_diff(ours(x), tokens.mean(1)) <= ATOL
    timm = pytest.importorskip("timm")
    reference = timm.create_model("vit_huge_patch14_gap_224", pretrained=False, img_size=4 * patch, **TINY).eval()
    reference.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert max_diff(reference.forward_features(x), tokens) <= ATOL
        assert max_diff(reference(x), ours(x)) <= ATOL
