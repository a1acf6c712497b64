"""Meta's Web-SSL releases (Fan et al. 2025, facebookresearch/webssl): Web-DINO repositories are
transformers' Dinov2 type (SwiGLU MLP, LayerScale 1e-5, no registers), Web-MAE ones its `vit` type
(ViTModel: MAE's encoder, LayerNorm eps 1e-6).
Each registered name is the architecture its repository's config states (checked through vitzoo's
transformers reader on the config transformers writes for that shape; nothing is built at full
size), and a tiny model published as one repository of each kind loads under its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_dinov3 import max_diff, randomise

import vitzoo
from vitzoo import registry
from vitzoo.layers.swiglu import dinov2_swiglu_hidden_dim, packed_mlp_ratio
from vitzoo.weights.transformers_files import transformers_config

ATOL = 1e-5
# facebookresearch/webssl's model builders: name -> (width, depth, heads); the repositories' tags
DINO = {"300m": (1024, 24, 16), "1b": (1536, 40, 24), "2b": (2688, 24, 21), "3b": (3072, 26, 24)}
DINO.update({"5b": (3584, 32, 28), "7b": (4096, 32, 32)})
MAE = {"300m16": (1024, 24, 16), "700m14": (1280, 32, 16), "1b14": (1536, 40, 24), "2b14": (2688, 24, 21)}
MAE["3b14"] = (3072, 26, 24)
REPOS = {
    "webssl_dino7b14.full8b_378": ("facebook/webssl-dino7b-full8b-378", 378),
    "webssl_dino7b14.full8b_518": ("facebook/webssl-dino7b-full8b-518", 518),
    "webssl_dino2b14.light2b": ("facebook/webssl-dino2b-light2b-224", 224),
    "webssl_dino3b14.heavy2b": ("facebook/webssl-dino3b-heavy2b-224", 224),
    "webssl_mae300m16.full2b": ("facebook/webssl-mae300m-full2b-224", 224),
}


def _hf(name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    return getattr(transformers, name)


def _stated(config: Any, tmp_path: Any) -> dict[str, Any]:
    """The ViTConfig fields vitzoo reads from the config.json transformers writes for `config`
    (image size, patch, widths, MLP kind and width, LayerScale, norm eps, biases)."""
    return transformers_config(config.to_dict(), tmp_path / "config.json")


@pytest.mark.parametrize("size", list(DINO))
def test_web_dino_name_is_the_dinov2_config_its_repository_states(size, tmp_path):
    dim, depth, heads = DINO[size]
    config = _hf("Dinov2Config")(
        hidden_size=dim, num_hidden_layers=depth, num_attention_heads=heads, image_size=224, patch_size=14,
        use_swiglu_ffn=True, layerscale_value=1e-5,
    )  # fmt: skip
    entry = registry.get_entry(f"webssl_dino{size}14")
    registered = entry.resolve_config()
    assert registered.replace(**_stated(config, tmp_path)) == registered  # every field the file states
    assert (registered.reg_tokens, registered.global_pool, entry.family) == (0, "token", "webssl")
    for tag, cfg in entry.pretrained.items():
        assert cfg.source.startswith(f"hf-hub:facebook/webssl-dino{size}-") and cfg.license == "cc-by-nc-4.0", tag


@pytest.mark.parametrize("name", list(MAE))
def test_web_mae_name_is_the_vit_config_its_repository_states(name, tmp_path):
    dim, depth, heads = MAE[name]
    patch = int(name[-2:])
    config = _hf("ViTConfig")(
        hidden_size=dim, num_hidden_layers=depth, num_attention_heads=heads, intermediate_size=4 * dim,
        image_size=224, patch_size=patch, layer_norm_eps=1e-6,
    )  # fmt: skip
    entry = registry.get_entry(f"webssl_mae{name}")
    registered = entry.resolve_config()
    assert registered.replace(**_stated(config, tmp_path)) == registered and entry.family == "webssl"


def test_web_ssl_tags_name_their_repositories_and_sizes():
    for name, (repo, size) in REPOS.items():
        resolved = registry.resolve(name)
        assert resolved.pretrained_cfg is not None and resolved.config is not None
        assert resolved.pretrained_cfg.source == f"hf-hub:{repo}", name
        assert resolved.config.img_size == size and resolved.pretrained_cfg.input_size == (3, size, size), name


def test_web_dino_repository_loads_under_its_name(tmp_path, fake_hub, hf_cache):
    """A tiny Dinov2Model with Web-DINO's SwiGLU and LayerScale, published as
    facebook/webssl-dino1b-full2b-224, read under webssl_dino1b14.full2b at 96 wide."""
    config = _hf("Dinov2Config")(
        hidden_size=96, num_hidden_layers=2, num_attention_heads=4, image_size=56, patch_size=14,
        use_swiglu_ffn=True, layerscale_value=1e-5,
    )  # fmt: skip
    hf = randomise(_hf("Dinov2Model")(config), 11)
    hf.save_pretrained(tmp_path / "webdino")
    fake_hub.publish_dir("facebook/webssl-dino1b-full2b-224", tmp_path / "webdino")
    x = torch.randn(2, 3, 56, 56)
    tiny = dict(embed_dim=96, depth=2, num_heads=4, mlp_ratio=packed_mlp_ratio(96, dinov2_swiglu_hidden_dim(96, 4.0)))
    with torch.no_grad():
        out = hf(pixel_values=x)
        named = vitzoo.create("webssl_dino1b14.full2b", pretrained=True, **tiny).eval()
        assert named.config.img_size == 56
        assert max_diff(named.forward_features(x), out.last_hidden_state) <= ATOL
        assert max_diff(named(x), out.pooler_output) <= ATOL


def test_web_mae_repository_loads_under_its_name(tmp_path, fake_hub, hf_cache):
    """A tiny ViTModel (no pooler: vitzoo has no layer for ViTModel's tanh pooler under this name)
    published as facebook/webssl-mae300m-full2b-224, read under webssl_mae300m16.full2b."""
    config = _hf("ViTConfig")(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, image_size=32,
        patch_size=16, layer_norm_eps=1e-6,
    )  # fmt: skip
    hf = randomise(_hf("ViTModel")(config, add_pooling_layer=False), 12)
    hf.save_pretrained(tmp_path / "webmae")
    fake_hub.publish_dir("facebook/webssl-mae300m-full2b-224", tmp_path / "webmae")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = hf(pixel_values=x).last_hidden_state
        named = vitzoo.create("webssl_mae300m16.full2b", pretrained=True, embed_dim=64, depth=2, num_heads=4).eval()
        assert (named.config.img_size, named.config.norm_eps) == (32, 1e-6)
        assert max_diff(named.forward_features(x), tokens) <= ATOL and max_diff(named(x), tokens[:, 0]) <= ATOL


def test_docs_table_states_the_parameter_count_of_each_pixio_and_web_ssl_name():
    table = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text(encoding="utf-8")
    names = vitzoo.list_models("pixio_*") + vitzoo.list_models("webssl_*")
    assert len(names) == 16
    for name in names:
        assert f"{vitzoo.model_info(name)['num_params']:,}" in table, name
