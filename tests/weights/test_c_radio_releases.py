"""NVIDIA's own C-RADIOv4-H release (nvidia/C-RADIOv4-H: transformers' `radio` type, NVIDIA's tensor
names), registered as `vit_h16_radio_v4.nvidia` next to timm's copy of the same weights. A tiny
RadioModel published as that repository, without LayerScale as C-RADIOv4-H has none (transformers
fills layerscale_value 1.0, an identity), loads under the name and computes RadioModel's tokens.
NVIDIA's own C-RADIOv4-SO400M repository, in NVIDIA's remote-code config, is refused by name and by
its config."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_dinov3 import max_diff, randomise

import vitzoo
from vitzoo import registry
from vitzoo.weights.errors import WeightsFileError
from vitzoo.zoo import REFUSED_RELEASES

ATOL = 1e-5
TINY = dict(embed_dim=64, num_heads=4, depth=2)


def _hf(name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    return getattr(transformers, name)


def test_nvidia_release_is_registered_next_to_timms():
    entry, cfg = registry.get_pretrained_cfg("vit_h16_radio_v4.nvidia")
    _, timm_cfg = registry.get_pretrained_cfg("vit_h16_radio_v4.c_radio")
    assert cfg is not None and timm_cfg is not None
    assert cfg.source == "hf-hub:nvidia/C-RADIOv4-H"
    assert timm_cfg.source == "hf-hub:timm/vit_huge_patch16_radio_v4.c_radio"
    for key in ("input_size", "mean", "std", "crop_pct", "interpolation", "license"):
        assert getattr(cfg, key) == getattr(timm_cfg, key), key
    assert cfg.license == "nvidia-open-model-license"
    config = entry.resolve_config()
    assert (config.embed_dim, config.depth, config.reg_tokens, config.init_values) == (1280, 32, 9, None)
    assert (config.final_norm, config.no_embed_class) == (False, True)


def test_transformers_radio_checkpoint_loads_under_the_name(tmp_path, fake_hub, hf_cache):
    """3 class tokens and 7 registers (RadioConfig's defaults, C-RADIOv4-H's): the class token and 9
    registers; the position table for max_img_size 256 cropped to the 4 x 4 grid."""
    config = _hf("RadioConfig")(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=64, max_img_size=256
    )
    hf = randomise(_hf("RadioModel")(config), 9)
    with torch.no_grad():
        hf.embeddings.patch_projection.weight.mul_(0.2)  # tokens of order 1
        for layer in hf.encoder.layer:  # no LayerScale: transformers' identity
            layer.layer_scale1.lambda1.fill_(1.0)
            layer.layer_scale2.lambda1.fill_(1.0)
    directory = tmp_path / "hf"
    hf.save_pretrained(directory)
    file = directory / "model.safetensors"
    save_file({k: v for k, v in load_file(file).items() if ".ls" not in k and "layer_scale" not in k}, file)
    fake_hub.publish_dir("nvidia/C-RADIOv4-H", directory)
    x = torch.rand(2, 3, 64, 64)
    mean, std = torch.tensor(config.norm_mean).view(1, 3, 1, 1), torch.tensor(config.norm_std).view(1, 3, 1, 1)
    with torch.no_grad():
        out = hf(pixel_values=x)
        named = vitzoo.create("vit_h16_radio_v4.nvidia", **TINY, img_size=64).eval()
        tokens = named.forward_features((x - mean) / std)
        assert max_diff(tokens, out.last_hidden_state) <= ATOL
        assert max_diff(tokens[:, config.summary_idxs].flatten(1), out.summary) <= ATOL


def test_nvidia_so400m_release_is_refused_by_name():
    """NVIDIA's own C-RADIOv4-SO400M repository states NVIDIA's remote-code RADIO config, which no
    reader of vitzoo's reads: its name says so, and points at timm's release."""
    with pytest.raises(registry.UnknownModelError, match=r"no pretrained tag 'nvidia' \(refused: NVIDIA's own C-RADIO"):
        vitzoo.create("radio_so400m16.nvidia")
    for name in REFUSED_RELEASES:  # a refused release is a tag of a registered model, never registered itself
        base, _, tag = name.partition(".")
        assert tag and tag not in registry.get_entry(base).pretrained, name


def test_nvidia_remote_code_radio_config_is_refused(tmp_path):
    """A config.json in NVIDIA's remote-code form (RADIOModel; its ViT named by args.model) is named,
    not read as another layout."""
    config = {
        "architectures": ["RADIOModel"],
        "auto_map": {"AutoConfig": "hf_model.RADIOConfig", "AutoModel": "hf_model.RADIOModel"},
        "args": {"model": "vit_so400m_patch16_224", "cpe_max_size": 2048},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file(
        {"radio_model.model.patch_generator.embedder.weight": torch.ones(64, 768)}, tmp_path / "model.safetensors"
    )
    with pytest.raises(WeightsFileError, match=r"NVIDIA's remote-code RADIO config \(RADIOModel, args.model="):
        vitzoo.create("radio_so400m16", weights=str(tmp_path), **TINY)
