"""AIMv2 (an RMSNorm right after the patch embedding, `embed_norm`; no bias on the attention's output
nor in the SwiGLU MLP, `proj_bias=False`; its attention-pooling head, `global_pool="aimv2"`) and
PE-Core-G's attention pool with an MLP ratio of its own (`attn_pool_mlp_ratio`): timm's models and
transformers' Aimv2VisionModel / Aimv2Model with random weights at reduced depth and width, through
vitzoo's registered names; the backbone API, export, tuning and fine-tuning on a tiny AIMv2."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from test_dinov3 import randomise

import vitzoo
from vitzoo import registry
from vitzoo.flops import measure_flops, vit_flops
from vitzoo.model import ViTConfig
from vitzoo.weights.keymaps import to_vitzoo

ATOL = 1e-5
REDUCED = dict(depth=2, embed_dim=96, num_heads=2)
AIMV2 = {"aimv2_l14": "aimv2_large_patch14_224", "aimv2_h14_448": "aimv2_huge_patch14_448"}


def _timm(arch: str, **args: Any) -> torch.nn.Module:
    timm = pytest.importorskip("timm")
    if not timm.is_model(arch):
        pytest.skip(f"timm {timm.__version__} has no {arch} (AIMv2 came with timm 1.0.16)")
    torch.manual_seed(0)
    model = timm.create_model(arch, pretrained=False, **args).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    return model


def _ours(name: str, theirs: torch.nn.Module, **args: Any) -> torch.nn.Module:
    model = vitzoo.create(name, pretrained=False, **args).eval()
    model.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=name).state, strict=True)
    return model


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def test_registered_config_is_timms_aimv2():
    c = registry.get_entry("aimv2_l14").resolve_config()
    assert (c.embed_norm, c.proj_bias, c.qkv_bias, c.norm_layer, c.mlp_layer, c.class_token) == (
        True,
        False,
        False,
        "rmsnorm",
        "swiglu",
        False,
    )
    assert (c.global_pool, c.norm_eps, c.mlp_ratio) == ("avg", 1e-5, 2.75)
    assert vitzoo.model_info("aimv2_l14")["num_params"] == 309_197_824  # timm's, counted on the meta device


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if "448" in n else n for n in sorted(AIMV2)])
def test_timm_parity_at_the_native_and_another_size(name):
    """The registered name at depth 2 / width 96 computes timm's output at its grid, at another
    grid per call (dynamic_img_size: the table resampled as timm does) and after set_input_size."""
    arch, size = AIMV2[name], 56
    theirs = _timm(arch, img_size=size, dynamic_img_size=True, **REDUCED)
    ours = _ours(name, theirs, img_size=size, dynamic_img_size=True, **REDUCED)
    gen = torch.Generator().manual_seed(1)
    for shape in ((size, size), (70, 84)):
        x = torch.randn(2, 3, *shape, generator=gen)
        with torch.no_grad():
            assert _diff(ours(x), theirs(x)) <= ATOL
            assert _diff(ours.forward_features(x), theirs.forward_features(x)) <= ATOL
            _, got = ours.forward_intermediates(x, indices=[0, 1], norm=True)
            _, want = theirs.forward_intermediates(x, indices=[0, 1], norm=True)
            assert max(_diff(a, b) for a, b in zip(got, want)) <= ATOL
    fixed = _ours(name, theirs, img_size=size, **REDUCED)
    fixed.set_input_size(img_size=(70, 84))
    theirs.set_input_size(img_size=(70, 84))
    x = torch.randn(1, 3, 70, 84, generator=gen)
    with torch.no_grad():
        assert _diff(fixed(x), theirs(x)) <= ATOL


def test_pe_core_gigantic_pool_mlp_ratio_parity():
    """PE-Core-G's attention pool has an MLP of ratio 4 beside blocks of 8960 / 1536."""
    c = registry.get_entry("vit_pe_core_bigg14_448").resolve_config()
    assert (c.attn_pool_mlp_ratio, c.global_pool, round(c.mlp_ratio * 1536)) == (4.0, "map", 8960)
    assert vitzoo.model_info("vit_pe_core_bigg14_448")["num_params"] == 1_882_033_920
    args = dict(REDUCED, img_size=56, num_heads=2)
    theirs = _timm("vit_pe_core_gigantic_patch14_448", **args)
    assert theirs.attn_pool.mlp.fc1.out_features == 4 * 96
    ours = _ours("vit_pe_core_bigg14_448", theirs, **args)
    x = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert _diff(ours(x), theirs(x)) <= ATOL


def test_fields_count_and_refuse():
    base = ViTConfig(embed_dim=32, depth=2, num_heads=2, img_size=32, num_classes=3)
    for fields in (
        dict(embed_norm=True),
        dict(proj_bias=False),
        dict(proj_bias=False, mlp_layer="swiglu", act_layer="silu", norm_layer="rmsnorm", embed_norm=True),
        dict(global_pool="map", attn_pool_mlp_ratio=1.5),
        dict(global_pool="aimv2", class_token=False, qkv_bias=False),
        dict(global_pool="aimv2", qkv_bias=True, pool_include_prefix=True, attn_pool_num_heads=1),
    ):
        config = base.replace(**fields)
        with torch.device("meta"):
            model = vitzoo.VisionTransformer(config)
        assert config.num_params == sum(p.numel() for p in model.parameters()), fields
        assert vit_flops(config).total == measure_flops(model, config.input_size), fields
    with pytest.raises(ValueError, match="attn_pool_mlp_ratio"):
        base.replace(global_pool="map", attn_pool_mlp_ratio=0.0)
    with pytest.raises(TypeError, match="proj_bias"):
        base.replace(proj_bias="no")
    with pytest.raises(ValueError, match="distilled=True cannot be combined with global_pool='aimv2'"):
        base.replace(distilled=True, global_pool="aimv2")
    model = vitzoo.VisionTransformer(base)
    with pytest.raises(ValueError, match="global_pool='aimv2' is invalid for a model built without AIMv2's head"):
        model.reset_classifier(5, global_pool="aimv2")


def test_aimv2_pool_is_kept_or_dropped_by_reset_classifier_and_refused_by_the_timm_export(tmp_path):
    from vitzoo.weights.errors import WeightsMismatchError
    from vitzoo.weights.exporter import export

    config = ViTConfig(embed_dim=32, depth=1, num_heads=2, img_size=32, class_token=False, global_pool="aimv2")
    model = vitzoo.VisionTransformer(config).eval()
    pool = model.attn_pool
    model.reset_classifier(4)
    assert model.attn_pool is pool and model(torch.randn(1, 3, 32, 32)).shape == (1, 4)
    with pytest.raises(WeightsMismatchError, match="AIMv2's attention-pooling head"):
        export(model, "timm", tmp_path / "aimv2.safetensors")
    model.reset_classifier(4, global_pool="avg")
    assert model.attn_pool is None and model.config.global_pool == "avg"


# ---------------------------------------------------------------------------- transformers
def _hf(name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name} (AIMv2 came with transformers 4.54)")
    return getattr(transformers, name)


HF_TINY = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=2, image_size=56)


def test_transformers_aimv2_vision_model(tmp_path):
    config = _hf("Aimv2VisionConfig")(**HF_TINY, use_head=False)
    torch.manual_seed(0)
    hf = _hf("Aimv2VisionModel")(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.1)
    hf.save_pretrained(tmp_path / "hf")
    x = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = hf(pixel_values=x).last_hidden_state
        model = vitzoo.from_pretrained(tmp_path / "hf").eval()
        assert _diff(model.forward_features(x), out) <= ATOL
        assert _diff(model(x), out.mean(dim=1)) <= ATOL  # the tokens averaged
    c = model.config
    assert (c.embed_norm, c.proj_bias, c.qkv_bias, c.norm_layer, c.norm_eps) == (True, False, False, "rmsnorm", 1e-5)
    named = vitzoo.create("aimv2_l14", weights=tmp_path / "hf", img_size=56, embed_dim=64, depth=2, num_heads=2)
    with torch.no_grad():
        assert _diff(named.eval().forward_features(x), out) <= ATOL


@pytest.mark.parametrize("key, value", [("is_native", True), ("mlp_bias", True)], ids=["native", "bias"])
def test_transformers_aimv2_settings_vitzoo_does_not_compute_are_refused(key, value, tmp_path):
    from vitzoo.weights.errors import WeightsFileError
    from vitzoo.weights.transformers_files import transformers_config

    cfg = {"model_type": "aimv2_vision_model", **HF_TINY, "use_head": False, key: value}
    with pytest.raises(WeightsFileError, match=key):
        transformers_config(cfg, tmp_path / "config.json")
    whole = {"model_type": "aimv2", "vision_config": {**HF_TINY, "use_head": False}}
    assert transformers_config(whole, tmp_path / "config.json")["embed_norm"] is True


@pytest.mark.parametrize("bias", [False, True], ids=["unbiased", "biased"])
def test_transformers_aimv2_attention_pooling_head(bias, tmp_path):
    """use_head=True (the LiT release's vision tower): vitzoo's pooled output is pooler_output, its
    tokens last_hidden_state; the head's k/v biased with qkv_bias, its output projection always."""
    config = _hf("Aimv2VisionConfig")(**HF_TINY, use_head=True, qkv_bias=bias, mlp_bias=bias)
    hf = randomise(_hf("Aimv2VisionModel")(config), 0)
    hf.save_pretrained(tmp_path / "hf")
    x = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out = hf(pixel_values=x)
        model = vitzoo.from_pretrained(tmp_path / "hf").eval()
        assert _diff(model(x), out.pooler_output) <= ATOL
        assert _diff(model.forward_features(x), out.last_hidden_state) <= ATOL
    assert (model.config.global_pool, model.config.qkv_bias, model.config.num_classes) == ("aimv2", bias, 0)
    assert ("attn_pool.kv.bias" in model.state_dict()) is bias
    stated = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**stated, "use_head": False}))
    from vitzoo.weights.errors import WeightsMismatchError

    with pytest.raises(WeightsMismatchError, match=r"states global_pool='avg', but .* global_pool='aimv2'"):
        vitzoo.from_pretrained(tmp_path / "hf")  # a config that no longer says use_head: named, not guessed


def test_transformers_aimv2_whole_model_projects_the_heads_output(tmp_path):
    """A whole Aimv2Model (the LiT layout): its visual_projection is the head (no bias), so vitzoo's
    output is get_image_features; one saved with use_head=False has no pooled output to project."""
    vision = {**HF_TINY, "use_head": True}
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    config = _hf("Aimv2Config")(vision_config=vision, text_config=text, projection_dim=48)
    hf = randomise(_hf("Aimv2Model")(config), 0)
    hf.save_pretrained(tmp_path / "whole")
    x = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want = hf.get_image_features(pixel_values=x)
        want = getattr(want, "pooler_output", want)  # transformers 5 returns the vision output, projected
        model = vitzoo.from_pretrained(tmp_path / "whole").eval()
        assert _diff(model(x), want) <= ATOL
    assert (model.config.num_classes, model.config.head_bias, model.config.global_pool) == (48, False, "aimv2")
    config.vision_config.use_head = False
    _hf("Aimv2Model")(config).save_pretrained(tmp_path / "headless")
    from vitzoo.weights.errors import WeightsMismatchError

    with pytest.raises(WeightsMismatchError, match=r"visual_projection\.weight without the attention-pooling head"):
        vitzoo.from_pretrained(tmp_path / "headless")


def test_config_defaults_are_aimv2visionconfigs_own():
    from vitzoo.weights.transformers_files import FAMILIES

    defaults = _hf("Aimv2VisionConfig")().to_dict()
    ours = FAMILIES["aimv2_vision_model"].defaults
    assert {k: defaults[k] for k in ours} == ours


# ---------------------------------------------------------------------------- the backbone API
TINY_AIMV2 = dict(img_size=28, patch_size=7, in_chans=1, embed_dim=32, depth=2, num_heads=2, num_classes=10)


def _tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    return vitzoo.create("aimv2_l14", **TINY_AIMV2).eval()


@pytest.mark.slow  # export and optimize end to end: CI runs it with -m slow
def test_features_dense_optimize_and_export(tmp_path, monkeypatch):
    from vitzoo import deploy
    from vitzoo.inference import timing

    model = _tiny()
    x = torch.randn(2, 1, 28, 28, generator=torch.Generator().manual_seed(4))
    torch.manual_seed(0)
    features = vitzoo.create("aimv2_l14", features_only=True, out_indices=(0, 1), **TINY_AIMV2).eval()
    features.model.load_state_dict(model.state_dict(), strict=False)  # the pruned model: no head
    with torch.no_grad():
        maps = features(x)
        _, want = model.forward_intermediates(x, indices=(0, 1))
        assert all(torch.equal(a, b) for a, b in zip(maps, want))
        dense = vitzoo.dense_features(model, x)
        assert dense.shape == (2, 32, 4, 4)
        logits = model(x)
    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(timing, "ROUND_S", 0.005)
    fast = vitzoo.optimize(model, x, candidates=["eager-explicit"], cache=False)
    with torch.inference_mode():
        assert _diff(fast(x), logits) <= 1e-4
    if hasattr(torch.export, "Dim"):  # torch.export programs: torch >= 2.2 (deploy refuses older torch by name)
        program = deploy.load_program(deploy.export(model, tmp_path / "aimv2.pt2"))
        with torch.no_grad():
            assert _diff(program(x), logits) <= ATOL
    pytest.importorskip("onnxruntime")
    import onnxruntime

    onnx = deploy.export(model, tmp_path / "aimv2.onnx")
    session = onnxruntime.InferenceSession(str(onnx))
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert _diff(torch.from_numpy(got), logits) <= 1e-4


@pytest.mark.slow  # two short epochs: ~15 s on 2 cores
def test_finetune_lowers_the_loss_and_the_pictures_run(tmp_path):
    from vitzoo.data import DataSplits, load_mnist_sample
    from vitzoo.train import TrainConfig, fit
    from vitzoo.viz import plot_attention, plot_pca

    full = load_mnist_sample()
    idx = torch.cat([torch.nonzero(full.train.labels == c).flatten()[:20] for c in range(10)]).sort().values
    val = torch.cat([torch.nonzero(full.val.labels == c).flatten()[:10] for c in range(10)]).sort().values
    splits = DataSplits(train=full.train.subset(idx), val=full.val.subset(val), name="mnist-sample", kind="digits")
    model = _tiny().train()
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = TrainConfig(epochs=2, batch_size=20, lr=3e-3, progress=False, seed=7)
        fit(model, splits, config=config, out_dir=tmp_path / "run")
    finally:
        torch.set_num_threads(previous)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["train_loss"] < records[0]["train_loss"]
    model.eval()
    plot_attention(model, out=tmp_path / "attention.png")
    assert (tmp_path / "attention.png").read_bytes()[:4] == b"\x89PNG"
    from PIL import Image

    photo = Image.fromarray(full.val.images[0, 0].numpy())
    plot_pca(model, [photo, photo], size=28, out=tmp_path / "pca.png")
    assert (tmp_path / "pca.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------- the LiT release
def test_lit_release_is_registered_with_apples_repo_and_licence():
    entry, cfg = registry.get_pretrained_cfg("aimv2_l14_lit.apple")
    assert cfg is not None and cfg.source == "hf-hub:apple/aimv2-large-patch14-224-lit"
    assert (cfg.license, cfg.num_classes, cfg.input_size, cfg.mean, cfg.crop_pct) == (
        "apple-amlr",
        768,
        (3, 224, 224),
        (0.48145466, 0.4578275, 0.40821073),
        1.0,
    )
    c = entry.resolve_config()
    assert (c.global_pool, c.num_classes, c.head_bias, entry.timm_name) == ("aimv2", 768, False, None)
    timm_trunk = registry.get_entry("aimv2_l14").resolve_config()
    assert c.replace(global_pool="avg", num_classes=0, head_bias=True, img_size=timm_trunk.img_size) == timm_trunk
    assert c.input_size == timm_trunk.input_size


def test_lit_parameters_are_transformers_vision_tower_and_projection():
    """Counted on the meta device: Aimv2VisionConfig's defaults are the LiT's vision tower (use_head),
    Aimv2Model's visual_projection adds 1024 x 768."""
    with torch.device("meta"):
        tower = _hf("Aimv2VisionModel")(_hf("Aimv2VisionConfig")(use_head=True))
    want = sum(p.numel() for p in tower.parameters()) + 1024 * 768
    assert vitzoo.model_info("aimv2_l14_lit")["num_params"] == want == 313_132_032


def _apple_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An Aimv2Model state in the names of Apple's remote code: transformers' conversion script
    (convert_aimv2_original_pytorch_to_hf.py) read backwards, q/k/v fused again."""
    renames = [
        (r"vision_model\.embeddings\.patch_embed\.", "image_encoder.preprocessor.patchifier.proj."),
        (r"vision_model\.embeddings\.rms_norm\.", "image_encoder.preprocessor.patchifier.norm."),
        (r"vision_model\.embeddings\.position_embedding\.weight", "image_encoder.preprocessor.pos_embed"),
        (r"vision_model\.encoder\.layers\.(\d+)\.attention\.out_proj\.", r"image_encoder.trunk.blocks.\1.attn.proj."),
        (r"vision_model\.encoder\.layers\.(\d+)\.ffn\.gate_proj\.", r"image_encoder.trunk.blocks.\1.mlp.fc1."),
        (r"vision_model\.encoder\.layers\.(\d+)\.ffn\.up_proj\.", r"image_encoder.trunk.blocks.\1.mlp.fc3."),
        (r"vision_model\.encoder\.layers\.(\d+)\.ffn\.down_proj\.", r"image_encoder.trunk.blocks.\1.mlp.fc2."),
        (r"vision_model\.encoder\.layers\.(\d+)\.rms_norm([12])\.", r"image_encoder.trunk.blocks.\1.norm_\2."),
        (r"vision_model\.rms_norm\.", "image_encoder.trunk.post_trunk_norm."),
        (r"vision_model\.head\.cls_token", "image_encoder.head.cls_token"),
        (r"vision_model\.head\.([kv])_proj\.", r"image_encoder.head.\1."),
        (r"vision_model\.head\.output_proj\.", "image_encoder.head.linear."),
        (r"visual_projection\.", "image_projector."),
        (r"text_model\.", "text_encoder."),
        (r"text_projection\.", "text_projector."),
        (r"logit_scale", "log_logit_scale"),
    ]
    import re

    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        m = re.fullmatch(r"vision_model\.encoder\.layers\.(\d+)\.attention\.([qkv])_proj\.weight", key)
        if m:
            if m.group(2) == "q":
                parts = [state[key.replace("q_proj", f"{p}_proj")] for p in "qkv"]
                out[f"image_encoder.trunk.blocks.{m.group(1)}.attn.qkv.weight"] = torch.cat(parts)
            continue
        for pattern, repl in renames:
            key = re.sub(f"^{pattern}", repl, key)
        out[key] = value.unsqueeze(0) if key == "image_encoder.preprocessor.pos_embed" else value
    return out


@pytest.mark.parametrize("layout", ["transformers", "apple"])
def test_lit_release_loads_under_its_name(layout, tmp_path, fake_hub, hf_cache):
    """A tiny Aimv2Model published as apple/aimv2-large-patch14-224-lit, in transformers' names or in
    those of Apple's remote code (the file on the Hub's main branch): `aimv2_l14_lit.apple` at that
    size computes get_image_features."""
    from safetensors.torch import load_file, save_file

    vision = {**HF_TINY, "use_head": True}
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    hf = randomise(_hf("Aimv2Model")(_hf("Aimv2Config")(vision_config=vision, text_config=text, projection_dim=48)), 7)
    directory = tmp_path / "hf"
    hf.save_pretrained(directory)
    if layout == "apple":
        file = directory / "model.safetensors"
        save_file(_apple_names(load_file(file)), file)
    fake_hub.publish_dir("apple/aimv2-large-patch14-224-lit", directory)
    x = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        want = hf.get_image_features(pixel_values=x)
        want = getattr(want, "pooler_output", want)
        named = vitzoo.create("aimv2_l14_lit.apple", embed_dim=64, depth=2, num_heads=2, img_size=56, num_classes=48)
        assert _diff(named.eval()(x), want) <= ATOL
