"""DINOv3 (`dinov3_{s,s_plus,b,l,h_plus,7b}16[_qkvb]`) against timm's and transformers' own models.

Every model has random weights in its library's native layout and runs at reduced depth and width
(the same code path as the full sizes: timm.create_model(name, depth=2, embed_dim=64, ...) and
vitzoo.create(name, ...) with the same overrides), in fp32:
  * timm (its EVA class, LayerScale named gamma_1 / gamma_2): forward, forward_features, pre-logits
    and forward_intermediates within 1e-5, with timm's average pooling and with the class token;
    parameter counts equal (every size's names and shapes: tests/test_zoo.py); other input sizes
    (224x320, 512x512) within 1e-4;
  * every source: timm's hub repository (the registered one, on the local fake Hub), a bare file,
    "timm:<name>", a timm directory (from_pretrained);
  * transformers' DINOv3ViTModel (plain and gated MLP): pooler_output (the class token) and
    last_hidden_state within 1e-5, with its config's activation, eps, rotary base and preprocessing.
timm < 1.0.20 and transformers < 4.56 have no DINOv3: those tests skip, naming the version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo import registry

timm = pytest.importorskip("timm")

ATOL, ATOL_SIZES = 1e-5, 1e-4
TINY = dict(depth=2, embed_dim=64, num_heads=2, img_size=64)  # head width 32: 8 rotary bands per axis
# One name per code path: plain MLP without biases, q/v biases, SwiGLU (align 8), and the 7B's
# SwiGLU at ratio 2 with align 64 (width 72: 144 hidden units rounded up to 192).
VARIANTS = {
    "dinov3_s16": TINY,
    "dinov3_s16_qkvb": TINY,
    "dinov3_s_plus16": TINY,
    "dinov3_7b16": dict(TINY, embed_dim=72),
}


def _timm_arch(name: str) -> str:
    arch = registry.get_entry(name).timm_name
    assert arch is not None
    if not timm.is_model(arch):
        pytest.skip(f"timm {timm.__version__} has no {arch} (DINOv3 came with timm 1.0.20)")
    return arch


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Random values everywhere (zero biases and LayerScale at 1e-5 would hide mix-ups), scaled
    so that 2 blocks stay well-conditioned."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def timm_model(name: str, seed: int = 0, **kwargs: Any) -> torch.nn.Module:
    return randomise(timm.create_model(_timm_arch(name), **{**VARIANTS.get(name, TINY), **kwargs}), seed)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def save_timm_file(model: torch.nn.Module, path: Path) -> Path:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    return path


@pytest.mark.parametrize("name", list(VARIANTS))
def test_timm_parity_forward_features_pre_logits_intermediates(name, tmp_path):
    reference = timm_model(name)
    file = save_timm_file(reference, tmp_path / "w.safetensors")
    ours = vitzoo.create(name, weights=file, **VARIANTS[name]).eval()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    assert ours.config.global_pool == "avg" == reference.global_pool  # timm's default, kept
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert max_diff(ours.forward_features(x), reference.forward_features(x)) <= ATOL
        assert max_diff(ours(x), reference(x)) <= ATOL
        tokens = reference.forward_features(x)
        assert (
            max_diff(ours.forward_head(tokens, pre_logits=True), reference.forward_head(tokens, pre_logits=True))
            <= ATOL
        )
        for kwargs in (dict(indices=2), dict(indices=[0], norm=True, output_fmt="NLC", return_prefix_tokens=True)):
            final, inter = ours.forward_intermediates(x, **kwargs)
            ref_final, ref_inter = reference.forward_intermediates(x, **kwargs)
            assert max_diff(final, ref_final) <= ATOL
            for a, b in zip(inter, ref_inter):
                for u, v in zip(a, b) if isinstance(a, tuple) else ((a, b),):
                    assert u.shape == v.shape and max_diff(u, v) <= ATOL


def test_class_token_embedding_is_one_argument_away(tmp_path):
    """DINOv3's own embedding is the class token; timm (and vitzoo's default, as timm's pretrained
    cfg) pool the patch tokens. global_pool="token" gives the former, equal to timm's."""
    reference = timm_model("dinov3_b16", global_pool="token")
    file = save_timm_file(reference, tmp_path / "w.safetensors")
    avg = vitzoo.create("dinov3_b16", weights=file, **TINY).eval()
    token = vitzoo.create("dinov3_b16", weights=file, global_pool="token", **TINY).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert max_diff(token(x), reference(x)) <= ATOL
        assert max_diff(token(x), avg.forward_features(x)[:, 0]) == 0.0
        assert max_diff(avg(x), avg.forward_features(x)[:, 5:].mean(1)) <= 1e-6  # 1 class + 4 registers
    assert vitzoo.create("dinov3_b16", depth=1).config.global_pool == "avg"


@pytest.mark.parametrize("size", [(224, 320), (512, 512)])
def test_rope_at_other_input_sizes(size, tmp_path):
    """dynamic_img_size: the rotary embedding is computed for each input's grid, as timm does."""
    small = dict(depth=1, embed_dim=32, num_heads=2, img_size=64)
    reference = timm_model("dinov3_s16", **small)
    ours = vitzoo.create("dinov3_s16", weights=save_timm_file(reference, tmp_path / "w.safetensors"), **small).eval()
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        assert max_diff(ours.forward_features(x), reference.forward_features(x)) <= ATOL_SIZES


# ---------------------------------------------------------------------------- sources
def test_timm_hub_repo_file_timm_source_and_directory(tmp_path, fake_hub, hf_cache, monkeypatch):
    from timm.models._hub import save_for_hf

    reference = timm_model("dinov3_b16_qkvb", seed=3)
    repo = tmp_path / "repo"
    save_for_hf(reference, repo, model_args=TINY, safe_serialization=True)
    entry, pcfg = registry.get_pretrained_cfg("dinov3_b16_qkvb.lvd1689m")
    assert pcfg is not None and pcfg.source == "hf-hub:timm/vit_base_patch16_dinov3_qkvb.lvd1689m"
    fake_hub.publish_dir(pcfg.source.removeprefix("hf-hub:"), repo)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        expected = reference(x)
        from_hub = vitzoo.create("dinov3_b16_qkvb.lvd1689m", **TINY).eval()
        from_file = vitzoo.create("dinov3_b16_qkvb", weights=repo / "model.safetensors", **TINY).eval()
        from_dir = vitzoo.from_pretrained(repo).eval()
        monkeypatch.setattr(timm, "create_model", lambda *args, **kwargs: reference)
        from_timm = vitzoo.create("dinov3_b16_qkvb", weights=f"timm:{entry.timm_name}.lvd1689m", **TINY).eval()
        for model in (from_hub, from_file, from_dir, from_timm):
            assert max_diff(model(x), expected) <= ATOL
    cfg = from_hub.pretrained_cfg
    assert (cfg.license, cfg.crop_pct, cfg.interpolation) == ("dinov3-license", 1.0, "bicubic")
    assert "gated" in cfg.description


# ---------------------------------------------------------------------------- transformers
def _hf(name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name} (DINOv3 came with transformers 4.56)")
    return getattr(transformers, name)


HF_TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256, image_size=64)
PROCESSOR = {
    "image_processor_type": "DINOv3ViTImageProcessorFast",
    "size": {"height": 64, "width": 64},
    "resample": 2,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
}


@pytest.mark.parametrize(
    "extra",
    [dict(num_register_tokens=4), dict(num_register_tokens=4, use_gated_mlp=True, hidden_act="silu", rope_theta=50.0)],
)
def test_transformers_dinov3_model(extra, tmp_path, fake_hub, hf_cache):
    config = _hf("DINOv3ViTConfig")(**HF_TINY, layer_norm_eps=1e-5, **extra)
    hf = randomise(_hf("DINOv3ViTModel")(config), 4)
    hf.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "preprocessor_config.json").write_text(json.dumps(PROCESSOR))
    x = torch.randn(2, 3, 64, 96)  # another size than the config's: the rotary embedding follows
    with torch.no_grad():
        out = hf(pixel_values=x)
        model = vitzoo.from_pretrained(tmp_path / "hf").eval()
        assert model.config.global_pool == "token" and model.config.rope == "dinov3"
        assert max_diff(model(x), out.pooler_output) <= ATOL
        assert max_diff(model.forward_features(x), out.last_hidden_state) <= ATOL
        fake_hub.publish_dir("facebook/dinov3-vits16-pretrain-lvd1689m", tmp_path / "hf")
        name = "dinov3_s_plus16_qkvb" if extra.get("use_gated_mlp") else "dinov3_s16_qkvb"
        named = vitzoo.create(
            name, weights="hf-hub:facebook/dinov3-vits16-pretrain-lvd1689m", global_pool="token", **TINY
        ).eval()
        assert max_diff(named(x), out.pooler_output) <= ATOL
    c = model.config
    gated = bool(extra.get("use_gated_mlp"))
    assert (c.act_layer, c.mlp_layer, c.norm_eps) == (("silu", "swiglu") if gated else ("gelu", "mlp")) + (1e-5,)
    assert (c.rope_temperature, c.reg_tokens, c.qkv_bias, c.k_bias) == (extra.get("rope_theta", 100.0), 4, True, False)
    cfg = model.pretrained_cfg
    assert (cfg.input_size, cfg.interpolation, cfg.crop_pct) == ((3, 64, 64), "bilinear", 1.0)
    assert cfg.mean == (0.485, 0.456, 0.406)


def test_transformers_dinov3_without_registers(tmp_path):
    """num_register_tokens=0: transformers keeps an empty (1, 0, D) register tensor, which is no
    registers (it used to be refused as an unexpected reg_token)."""
    config = _hf("DINOv3ViTConfig")(**HF_TINY, num_register_tokens=0)
    hf = randomise(_hf("DINOv3ViTModel")(config), 6)
    hf.save_pretrained(tmp_path / "hf")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        out = hf(pixel_values=x)
        model = vitzoo.from_pretrained(tmp_path / "hf").eval()
        assert model.config.reg_tokens == 0 and model.num_prefix_tokens == 1
        assert max_diff(model(x), out.pooler_output) <= ATOL
        assert max_diff(model.forward_features(x), out.last_hidden_state) <= ATOL


def test_released_zero_q_v_biases_load_into_the_bias_free_names(tmp_path):
    """DINOv3's released B/L/H+ weights carry q and v biases that are all zero (transformers keeps
    query_bias / value_bias): they load into dinov3_b16 (no biases, as timm's default) unchanged in
    meaning; biases that are not zero are refused, naming them."""
    from vitzoo.weights import WeightsMismatchError

    config = _hf("DINOv3ViTConfig")(**HF_TINY, num_register_tokens=4)
    hf = randomise(_hf("DINOv3ViTModel")(config), 5)
    hf.save_pretrained(tmp_path / "nonzero")
    with pytest.raises(WeightsMismatchError, match=r"unexpected key\(s\).*blocks\.0\.attn\.q_bias"):
        vitzoo.create("dinov3_b16", weights=tmp_path / "nonzero", **TINY)
    with torch.no_grad():
        for layer in hf.modules():
            if hasattr(layer, "q_proj"):
                layer.q_proj.bias.zero_()
                layer.v_proj.bias.zero_()
    hf.save_pretrained(tmp_path / "zero")
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        model = vitzoo.create("dinov3_b16", weights=tmp_path / "zero", global_pool="token", **TINY).eval()
        assert model.blocks[0].attn.q_bias is None
        assert max_diff(model(x), hf(pixel_values=x).pooler_output) <= ATOL


def test_config_defaults_are_dinov3vitconfigs_own():
    """A config.json may leave out values equal to DINOv3ViTConfig's defaults: vitzoo's table of
    them must be transformers' own."""
    from vitzoo.weights.transformers_files import FAMILIES

    defaults = _hf("DINOv3ViTConfig")().to_dict()
    ours = FAMILIES["dinov3_vit"].defaults
    assert {k: defaults[k] for k in ours} == ours and len(ours) >= 18
