"""transformers model types whose tensors are layouts vitzoo reads (ViT-MSN, I-JEPA, DPT's ViT
backbone, MetaCLIP 2's and Chinese-CLIP's vision towers, TIPSv2, InternViT(-6B), Sapiens2): a tiny model with
random weights, saved by save_pretrained, loads through `vitzoo.from_pretrained` and computes what
transformers computes (max |diff| <= 1e-5); settings no vitzoo layer computes are refused by name."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo.weights import WeightsFileError, WeightsMismatchError

transformers = pytest.importorskip("transformers")

ATOL = 1e-5
TINY = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, image_size=32, patch_size=16
)
NO_MLP_WIDTH = {k: v for k, v in TINY.items() if k != "intermediate_size"}  # TIPSv2: mlp_ratio
TEXT = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


def _hf(name: str) -> Any:
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name} (newer versions have)")
    return getattr(transformers, name)


def _model(cls: str, config: str, **kw: Any) -> torch.nn.Module:
    model = _hf(cls)(_hf(config)(**kw))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # random values everywhere: zero biases and unit norms would hide mix-ups
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model.eval()


def _tokens(o: Any) -> torch.Tensor:
    return o.last_hidden_state


def _logits(o: Any) -> torch.Tensor:
    return o.logits


# (model class, config class, config, transformers' output, vitzoo's: "tokens" forward_features, "out" forward)
CASES: dict[str, tuple[str, str, dict[str, Any], Callable[[Any], torch.Tensor], str]] = {
    "vit_msn": ("ViTMSNModel", "ViTMSNConfig", TINY, _tokens, "tokens"),
    "ijepa": ("IJepaModel", "IJepaConfig", TINY, _tokens, "tokens"),
    **{  # the classifiers' logits
        f"{kind}_classifier": (
            f"{prefix}ForImageClassification",
            f"{prefix}Config",
            dict(TINY, num_labels=5),
            _logits,
            "out",
        )
        for kind, prefix in (("vit_msn", "ViTMSN"), ("ijepa", "IJepa"))
    },
    "dpt": ("DPTModel", "DPTConfig", TINY, lambda o: o.pooler_output, "out"),
    "metaclip_2_vision": (
        "MetaClip2VisionModelWithProjection",
        "MetaClip2VisionConfig",
        dict(TINY, projection_dim=24),
        lambda o: o.image_embeds,
        "out",
    ),
    "chinese_clip_vision": (
        "ChineseCLIPVisionModel",
        "ChineseCLIPVisionConfig",
        TINY,
        lambda o: o.pooler_output,
        "out",
    ),
    "tipsv2": ("Tipsv2VisionModel", "Tipsv2VisionConfig", NO_MLP_WIDTH, _tokens, "tokens"),
    "tipsv2_swiglu": (
        "Tipsv2VisionModel",
        "Tipsv2VisionConfig",
        dict(NO_MLP_WIDTH, use_swiglu_ffn=True),
        lambda o: o.pooler_output,
        "out",
    ),
    "internvit": ("InternVLVisionModel", "InternVLVisionConfig", TINY, _tokens, "tokens"),
    # InternViT-6B: RMSNorm everywhere, q and k normalised over all heads at once (qk_norm="full")
    "internvit_6b": (
        "InternVLVisionModel",
        "InternVLVisionConfig",
        dict(TINY, use_qk_norm=True, norm_type="rms_norm"),
        _tokens,
        "tokens",
    ),
    # Sapiens2: grouped-query attention per layer, qk-norm, attention-only LayerScale, saved in Meta's names
    "sapiens2": (
        "Sapiens2Model",
        "Sapiens2Config",
        dict(TINY, num_key_value_heads_per_layer=[4, 2]),
        _tokens,
        "tokens",
    ),
    "sapiens2_first_last_rule_no_k_bias": (
        "Sapiens2Model",
        "Sapiens2Config",
        dict(
            TINY,
            num_first_full_attention_layers=0,
            num_last_full_attention_layers=1,
            num_key_value_attention_heads=1,
            key_bias=False,
        ),
        lambda o: o.pooler_output,
        "out",
    ),
    "sapiens2_plain": (
        "Sapiens2Model",
        "Sapiens2Config",
        dict(TINY, use_qk_norm=False, use_gated_mlp=False, num_register_tokens=0),
        _tokens,
        "tokens",
    ),
    "internvit_biased_final_norm": (
        "InternVLVisionModel",
        "InternVLVisionConfig",
        dict(TINY, attention_bias=True, use_mean_pooling=False),
        _tokens,
        "tokens",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_model_type_computes_what_transformers_computes(case, tmp_path):
    cls, config_cls, config, expected_of, ours = CASES[case]
    hf = _model(cls, config_cls, **config)
    hf.save_pretrained(tmp_path)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = expected_of(hf(pixel_values=x))
        model = vitzoo.from_pretrained(tmp_path).eval()
        got = model.forward_features(x) if ours == "tokens" else model(x)
    assert got.shape == expected.shape and (got - expected).abs().max().item() <= ATOL


@pytest.mark.parametrize(
    ("cls", "config_cls", "config", "vision"),
    [
        (
            "DPTForDepthEstimation",
            "DPTConfig",
            dict(
                TINY,
                backbone_out_indices=[0, 1],
                neck_hidden_sizes=[8, 16],
                reassemble_factors=[2, 1],
                fusion_hidden_size=8,
            ),
            "dpt",
        ),
        (
            "ChineseCLIPModel",
            "ChineseCLIPConfig",
            dict(vision_config=TINY, text_config=dict(TEXT, vocab_size=100), projection_dim=24),
            "vision_model",
        ),
        (
            "MetaClip2Model",
            "MetaClip2Config",
            dict(vision_config=TINY, text_config=TEXT, projection_dim=24),
            "vision_model",
        ),
        ("Tipsv2Model", "Tipsv2Config", dict(vision_config=NO_MLP_WIDTH, text_config=TEXT), "vision_model"),
    ],
)
def test_whole_models_are_read_for_their_vision_tower(cls, config_cls, config, vision, tmp_path):
    """DPT's depth model keeps its ViT backbone (its neck and head are left out); the image-text
    models their image tower (with its projection, where there is one)."""
    hf = _model(cls, config_cls, **config)
    hf.save_pretrained(tmp_path)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        model = vitzoo.from_pretrained(tmp_path).eval()
        if vision == "dpt":
            expected = hf.dpt(pixel_values=x).last_hidden_state
            assert (model.forward_features(x) - expected).abs().max().item() <= ATOL
            return
        expected = hf.get_image_features(pixel_values=x)
        expected = getattr(expected, "pooler_output", expected)  # transformers 5 returns an output object
        assert (model(x) - expected).abs().max().item() <= ATOL


@pytest.mark.parametrize(
    ("cls", "config_cls", "change", "error", "match"),
    [
        ("DPTModel", "DPTConfig", {"is_hybrid": True}, WeightsFileError, r"is_hybrid=True is not supported.*BiT"),
        ("DPTModel", "DPTConfig", {"backbone_config": {"model_type": "dinov2"}}, WeightsFileError, r"backbone_config="),
        (
            "InternVLVisionModel",
            "InternVLVisionConfig",
            {"norm_type": "group_norm"},
            WeightsFileError,
            r"norm_type='group_norm' is not supported",
        ),
        (  # its q/k norms are RMSNorms: with LayerNorm blocks, two norm kinds
            "InternVLVisionModel",
            "InternVLVisionConfig",
            {"use_qk_norm": True},
            WeightsFileError,
            r"use_qk_norm=True with norm_type='layer_norm'",
        ),
        ("IJepaModel", "IJepaConfig", {}, WeightsMismatchError, r"representation_size=None.*pre_logits\.fc\.weight"),
    ],
)
def test_settings_vitzoo_does_not_compute_are_refused_by_name(cls, config_cls, change, error, match, tmp_path):
    model = _hf(cls)(_hf(config_cls)(**TINY))
    if cls == "IJepaModel":  # a pooler (a Linear on the first patch token), which I-JEPA's classes leave out
        model = _hf(cls)(model.config, add_pooling_layer=True)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(error, match=match) as err:
        vitzoo.from_pretrained(tmp_path)
    assert str(Path(tmp_path) / "config.json") in str(err.value)


def test_sapiens2_module_names_read_as_its_saved_names(tmp_path):
    """transformers' module names (a live Sapiens2Model's state dict) and the names it saves (Meta's)
    give the same vitzoo state: q/k/v apart, the gated MLP packed gate first."""
    from safetensors.torch import load_file

    from vitzoo.weights.keymaps import to_vitzoo

    hf = _model("Sapiens2Model", "Sapiens2Config", **dict(TINY, num_key_value_heads_per_layer=[4, 2]))
    live = to_vitzoo(dict(hf.state_dict())).state
    hf.save_pretrained(tmp_path)
    saved = to_vitzoo(load_file(str(tmp_path / "model.safetensors"))).state
    assert set(live) == set(saved) and all(torch.equal(live[k], saved[k]) for k in live)
    assert live["blocks.1.attn.k_proj.weight"].shape == (32, 64) and "blocks.0.mlp.fc1.weight" in live
