"""Key maps of vitzoo.weights.keymaps: a checkpoint of each layout,
loaded through vitzoo, computes the reference implementation's logits (max |diff| <= 1e-5, fp32).

Each timm config is built with depth=2 at a 4x4 patch grid on both sides to keep the suite fast;
the shapes that differ between configs (width, heads, patch size, prefix tokens) are all still
exercised, and vit_ti16 is also checked at full depth and size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from timm.models._hub import save_for_hf

import vitzoo
from vitzoo.registry import timm_counterparts
from vitzoo.weights import UnknownFormatError, WeightsMismatchError
from vitzoo.weights.keymaps import detect_format, to_vitzoo
from vitzoo.zoo.curated import CURATED as _CURATED_MODELS

CURATED = {m.name for m in _CURATED_MODELS}
TIMM_NAMES = {k: v for k, v in timm_counterparts().items() if k in CURATED}  # the generated: tests/zoo

ATOL = 1e-5


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def timm_from_file(timm_name: str, path, **kwargs) -> torch.nn.Module:
    """timm's own model with timm's own loader reading `path` (the reference side)."""
    return timm.create_model(
        timm_name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path), custom_load=False), **kwargs
    ).eval()


def reduced(name: str) -> dict[str, int]:
    """depth=2 at a 4x4 patch grid; the rotary-embedding families also 48 wide: what differs
    between their configs is the layout (kept), and their width would make them the slowest tests
    here (tests/weights/test_rope_families.py checks them further). The others: a width above
    ViT-B's at ViT-B's (768, 12 heads), as in the timm contract. The key map reads names and
    shapes, the same at any grid: the same code path at a cost the suite can afford (every
    config's full-size names and shapes: tests/test_zoo.py, on the meta device)."""
    config = vitzoo.model_info(name)["config"]
    patch = config["patch_size"] if isinstance(config["patch_size"], int) else max(config["patch_size"])
    if config.get("rope"):
        return {"depth": 2, "embed_dim": 48, "num_heads": 2, "img_size": 4 * patch}
    # timm's NaFlexVit sizes its table by its own field, not img_size: its configs keep their size
    args = {"depth": 2} if name.startswith("naflexvit") else {"depth": 2, "img_size": 4 * patch}
    if config["embed_dim"] > 768:
        args.update(embed_dim=768, num_heads=12)
    return args


def timm_with_checkpoint(timm_name: str, out: Path, **kwargs: int) -> torch.nn.Module:
    """timm's model with random weights, saved by timm in its hub layout (config.json +
    model.safetensors) in `out`: the reference computes with the very weights the file holds."""
    torch.manual_seed(0)
    model = timm.create_model(timm_name, **kwargs)
    save_for_hf(model, out, model_args=dict(kwargs), safe_serialization=True)
    return model.eval()


# ---------------------------------------------------------------------------- timm hub layout
@pytest.mark.every_config
@pytest.mark.parametrize("name", sorted(TIMM_NAMES))
def test_every_timm_config_has_identical_logits(name, tmp_path):
    timm_name = TIMM_NAMES[name]
    if vitzoo.model_info(name)["config"]["act_layer"] == "quick_gelu":  # OpenAI CLIP: timm's QuickGELU variant
        timm_name = timm_name.replace("_clip_", "_clip_quickgelu_")
    if not timm.is_model(timm_name):
        pytest.skip(f"timm {timm.__version__} has no {timm_name}")
    size = reduced(name)
    reference = timm_with_checkpoint(timm_name, tmp_path, **size)
    model = vitzoo.create(name, weights=str(tmp_path), **size).eval()
    x = torch.randn(2, 3, *model.config.input_size[1:], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL
    if "distilled" in name:  # training mode: the (class head, distillation head) pair
        reference.set_distilled_training(True)
        reference.train()
        model.train()
        with torch.no_grad():
            ours, theirs = model(x), reference(x)
        assert isinstance(ours, tuple) and len(ours) == 2
        assert max(max_diff(o, t) for o, t in zip(ours, theirs)) <= ATOL


def test_full_depth_vit_ti16_has_identical_logits(timm_checkpoint):
    ckpt = timm_checkpoint("vit_tiny_patch16_224")
    reference = timm_from_file("vit_tiny_patch16_224", ckpt / "model.safetensors")
    model = vitzoo.create("vit_ti16", weights=str(ckpt / "model.safetensors")).eval()
    assert model.config.depth == 12
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL


# ---------------------------------------------------------------------------- transformers
HF_SMALL = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    image_size=32,
    patch_size=8,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Random values everywhere (library inits zero biases and heads, which would hide mix-ups)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def test_transformers_vit_for_image_classification(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    hf = ViTForImageClassification(ViTConfig(**HF_SMALL, num_labels=7)).eval()
    _randomise(hf, 0)
    hf.save_pretrained(tmp_path)
    model = vitzoo.from_pretrained(tmp_path).eval()
    assert model.config.norm_eps == 1e-12  # transformers' eps is carried into the model
    assert all(m.eps == 1e-12 for m in model.modules() if isinstance(m, torch.nn.LayerNorm))
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert max_diff(model(x), hf(pixel_values=x).logits) <= ATOL


def test_transformers_eps_also_carried_by_create(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    hf = ViTForImageClassification(ViTConfig(**HF_SMALL, num_labels=3)).eval()
    hf.save_pretrained(tmp_path)
    model = vitzoo.create(
        "vit_ti16", weights=str(tmp_path), img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0
    )
    assert model.config.norm_eps == 1e-12 and model.config.num_classes == 3


def test_transformers_vit_model_pooler_is_the_representation_layer(tmp_path):
    from transformers import ViTConfig, ViTModel

    hf = ViTModel(ViTConfig(**HF_SMALL), add_pooling_layer=True).eval()
    _randomise(hf, 1)
    hf.save_pretrained(tmp_path)
    model = vitzoo.from_pretrained(tmp_path).eval()
    assert model.config.representation_size == 64 and model.config.num_classes == 0
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert max_diff(model(x), hf(pixel_values=x).pooler_output) <= ATOL
        assert max_diff(model.forward_features(x), hf(pixel_values=x).last_hidden_state) <= ATOL


def test_transformers_deit_with_teacher(tmp_path):
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher

    hf = DeiTForImageClassificationWithTeacher(DeiTConfig(**HF_SMALL, num_labels=5)).eval()
    _randomise(hf, 2)
    hf.save_pretrained(tmp_path)
    model = vitzoo.from_pretrained(tmp_path).eval()
    assert model.config.distilled
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = hf(pixel_values=x)
        assert max_diff(model(x), out.logits) <= ATOL  # eval: the average of both heads
        model.train()
        cls_logits, dist_logits = model(x)
        assert max_diff(cls_logits, out.cls_logits) <= ATOL
        assert max_diff(dist_logits, out.distillation_logits) <= ATOL


def test_transformers_in_memory_names_of_v5_are_mapped_too():
    from transformers import ViTConfig, ViTModel

    hf = ViTModel(ViTConfig(**HF_SMALL), add_pooling_layer=True)
    state = hf.state_dict()  # transformers 5.x module names (layers.i.attention.q_proj ...)
    converted = to_vitzoo(state)
    assert converted.format == "transformers"
    assert "blocks.1.attn.qkv.weight" in converted.state and "pre_logits.fc.weight" in converted.state


# ---------------------------------------------------------------------------- Google .npz
def write_original_vit_npz(model: vitzoo.VisionTransformer, path) -> None:
    """Write `model` with the original JAX ViT's array names and layouts (written here, in the
    test, independently of vitzoo's reader; timm's `_load_weights` documents the layout)."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    heads, dim = model.config.num_heads, model.config.embed_dim
    out = {
        "embedding/kernel": sd["patch_embed.proj.weight"].transpose(2, 3, 1, 0),  # OIHW -> HWIO
        "embedding/bias": sd["patch_embed.proj.bias"],
        "cls": sd["cls_token"],
        "Transformer/posembed_input/pos_embedding": sd["pos_embed"],
        "Transformer/encoder_norm/scale": sd["norm.weight"],
        "Transformer/encoder_norm/bias": sd["norm.bias"],
        "head/kernel": sd["head.weight"].T,
        "head/bias": sd["head.bias"],
    }
    if "pre_logits.fc.weight" in sd:
        out["pre_logits/kernel"] = sd["pre_logits.fc.weight"].T
        out["pre_logits/bias"] = sd["pre_logits.fc.bias"]
    for i in range(model.config.depth):
        b, blk = f"Transformer/encoderblock_{i}/", f"blocks.{i}."
        att = b + "MultiHeadDotProductAttention_1/"
        out[b + "LayerNorm_0/scale"], out[b + "LayerNorm_0/bias"] = sd[blk + "norm1.weight"], sd[blk + "norm1.bias"]
        out[b + "LayerNorm_2/scale"], out[b + "LayerNorm_2/bias"] = sd[blk + "norm2.weight"], sd[blk + "norm2.bias"]
        qkv_w = sd[blk + "attn.qkv.weight"].reshape(3, dim, dim)
        qkv_b = sd[blk + "attn.qkv.bias"].reshape(3, dim)
        for j, n in enumerate(("query", "key", "value")):
            out[att + f"{n}/kernel"] = qkv_w[j].T.reshape(dim, heads, dim // heads)
            out[att + f"{n}/bias"] = qkv_b[j].reshape(heads, dim // heads)
        out[att + "out/kernel"] = sd[blk + "attn.proj.weight"].T.reshape(heads, dim // heads, dim)
        out[att + "out/bias"] = sd[blk + "attn.proj.bias"]
        for r, fc in enumerate(("fc1", "fc2")):
            out[b + f"MlpBlock_3/Dense_{r}/kernel"] = sd[blk + f"mlp.{fc}.weight"].T
            out[b + f"MlpBlock_3/Dense_{r}/bias"] = sd[blk + f"mlp.{fc}.bias"]
    np.savez(path, **out)


def test_google_npz_matches_timms_npz_loader(tmp_path):
    torch.manual_seed(3)
    source = vitzoo.create("vit_s16", depth=2, num_classes=11)
    write_original_vit_npz(source, tmp_path / "ViT-S_16.npz")
    reference = timm.create_model("vit_small_patch16_224", depth=2, num_classes=11).eval()
    reference.load_pretrained(str(tmp_path / "ViT-S_16.npz"))  # timm's own .npz reader
    model = vitzoo.create("vit_s16", weights=str(tmp_path / "ViT-S_16.npz"), depth=2).eval()
    assert model.config.num_classes == 11
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL


def test_google_npz_with_pre_logits_and_head_count_from_shapes(tmp_path):
    torch.manual_seed(4)
    source = vitzoo.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=6, representation_size=24
    ).eval()
    write_original_vit_npz(source, tmp_path / "orig.npz")
    model = vitzoo.from_pretrained(tmp_path / "orig.npz").eval()  # .npz states heads in its shapes
    assert (model.config.num_heads, model.config.representation_size) == (3, 24)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert max_diff(model(x), source(x)) <= ATOL


# ---------------------------------------------------------------------------- torchvision
def test_torchvision_vit_b_16_layout(tmp_path):
    from torchvision.models.vision_transformer import VisionTransformer as TVViT

    # vit_b_16's exact shapes, two layers deep.
    tv = TVViT(
        image_size=224, patch_size=16, num_layers=2, num_heads=12, hidden_dim=768, mlp_dim=3072, num_classes=1000
    ).eval()
    _randomise(tv, 5)
    torch.save(tv.state_dict(), tmp_path / "vit_b_16.pth")
    model = vitzoo.create("vit_b16", depth=2).eval()
    vitzoo.load_weights(model, tmp_path / "vit_b_16.pth")
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert max_diff(model(x), tv(x)) <= ATOL


# ---------------------------------------------------------------------------- detection
def test_detection_by_keys():
    assert detect_format(["patch_embed.proj.weight", "cls_token"]) == "vitzoo"
    assert detect_format(["vit.embeddings.patch_embeddings.projection.weight"]) == "transformers"
    assert detect_format(["conv_proj.weight"]) == "torchvision"
    assert detect_format(["embedding/kernel"]) == "npz"


def test_unknown_layout_names_file_and_keys():
    with pytest.raises(UnknownFormatError, match=r"my\.ckpt: unknown checkpoint layout.*conv1\.weight"):
        to_vitzoo({"conv1.weight": torch.zeros(1), "fc.bias": torch.zeros(1)}, file="my.ckpt")


def test_unmapped_keys_of_a_known_layout_are_listed():
    state = {"vit.embeddings.patch_embeddings.projection.weight": torch.zeros(1), "vit.adapter.weight": torch.zeros(1)}
    with pytest.raises(WeightsMismatchError, match=r"no vitzoo counterpart: vit\.adapter\.weight"):
        to_vitzoo(state, file="x.safetensors")
