"""Pixio (transformers' `pixio` type, PixioModel; transformers >= 5.0) read exactly: its 8 class
tokens are vitzoo's class token and 7 registers, each with a position, pooled by their mean
(global_pool="prefix_avg", PixioModel's pooler_output). A tiny random PixioModel saved in its own
layout, and published as facebook/pixio-vitb16, loads by file and by name."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_dinov3 import max_diff, randomise

import vitzoo
from vitzoo import registry

ATOL = 1e-5
TINY = dict(embed_dim=64, depth=2, num_heads=4)
HF_TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=64, patch_size=16)


def _hf(name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name} (transformers >= 5.0 has)")
    return getattr(transformers, name)


@pytest.fixture(scope="module")
def pixio(tmp_path_factory):
    hf = randomise(_hf("PixioModel")(_hf("PixioConfig")(**HF_TINY)), 3)
    directory = tmp_path_factory.mktemp("pixio")
    hf.save_pretrained(directory)
    return hf, directory


def test_pixio_file_gives_last_hidden_state_and_pooler_output(pixio):
    hf, directory = pixio
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        out = hf(pixel_values=x)
        model = vitzoo.from_pretrained(directory).eval()
        c = model.config
        assert (c.class_token, c.reg_tokens, c.no_embed_class, c.global_pool) == (True, 7, False, "prefix_avg")
        assert (c.norm_eps, c.mlp_ratio) == (1e-6, 4.0)
        tokens = model.forward_features(x)
        assert tokens.shape == out.last_hidden_state.shape
        assert max_diff(tokens, out.last_hidden_state) <= ATOL
        assert max_diff(model(x), out.pooler_output) <= ATOL


def test_pixio_at_another_size_resamples_the_table_as_transformers(pixio):
    """PixioModel resamples its position table (bicubic, not antialiased) to every input size."""
    hf, directory = pixio
    x = torch.randn(1, 3, 96, 80)
    with torch.no_grad():
        out = hf(pixel_values=x)
        model = vitzoo.create("pixio_b16", weights=str(directory), **TINY, img_size=(96, 80)).eval()
        assert max_diff(model.forward_features(x), out.last_hidden_state) <= ATOL
        assert max_diff(model(x), out.pooler_output) <= ATOL


def test_pixio_published_repository_loads_under_its_name(pixio, fake_hub, hf_cache):
    hf, directory = pixio
    fake_hub.publish_dir("facebook/pixio-vitb16", directory)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        named = vitzoo.create("pixio_b16.fb", pretrained=True, **TINY, img_size=64)
        assert max_diff(named.eval()(x), hf(pixel_values=x).pooler_output) <= ATOL


def test_pixio_releases_are_registered_by_their_repositories():
    sizes = {"b16": (768, 12), "l16": (1024, 24), "h16": (1280, 32), "1b16": (1536, 48), "5b16": (3072, 48)}
    for size, (dim, depth) in sizes.items():
        entry, cfg = registry.get_pretrained_cfg(f"pixio_{size}.fb")
        assert cfg is not None and cfg.source == f"hf-hub:facebook/pixio-vit{size}"
        assert cfg.license == "fair-noncommercial-research-license" and cfg.input_size == (3, 256, 256)
        config = entry.resolve_config()
        assert (config.embed_dim, config.depth, config.reg_tokens, config.global_pool) == (dim, depth, 7, "prefix_avg")
        assert entry.family == "pixio"


def test_pixio_export_to_timm_is_refused(pixio, tmp_path):
    """timm's ViT reads the tensors (class token and 7 registers) but pools by one token, not their mean."""
    from vitzoo.weights.errors import WeightsMismatchError

    model = vitzoo.from_pretrained(pixio[1])
    with pytest.raises(WeightsMismatchError, match=r"cannot export to timm: .*mean of its prefix tokens"):
        vitzoo.export(model, "timm", tmp_path / "pixio.safetensors")


def test_token_merging_pools_the_class_tokens_mean_too(pixio):
    """ToMe never merges the prefix tokens: their plain mean is the pool of merged tokens too."""
    from vitzoo.tome import apply_tome

    model = vitzoo.from_pretrained(pixio[1]).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert max_diff(apply_tome(model, 0)(x), model(x)) == 0.0
        merged = apply_tome(model, 2)
        tokens = merged.forward_features(x)
        assert tokens.shape[1] < 8 + 16 and max_diff(merged.forward_head(tokens), tokens[:, :8].mean(dim=1)) == 0.0


def test_prefix_avg_needs_a_class_token():
    with pytest.raises(ValueError, match=r"prefix_avg.*needs class_token=True"):
        vitzoo.ViTConfig(class_token=False, global_pool="prefix_avg")
