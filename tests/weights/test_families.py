"""Today's ViT families (DeiT III, DINO, MAE, DINOv2 with and without registers, CLIP, SigLIP) load
from every place their weights live and compute what their reference library computes.

Every model has random weights in its library's native layout, at a tiny width (64, 4 heads,
2 blocks) and image size, and every comparison is in fp32 with max |diff| <= 1e-5:
  * timm's layout, from its hub repository (the registered source, on the local fake Hub) and from
    a bare weights file, against timm's own model of that architecture and activation;
  * transformers' layouts (Dinov2Model, Dinov2WithRegistersModel, CLIPVisionModelWithProjection,
    CLIPModel, SiglipVisionModel, SiglipModel, ViTMAEModel), from a save_pretrained directory and an
    `hf-hub:` repo, against `pooler_output` (DINOv2, SigLIP), `image_embeds` (CLIP) and the
    encoder's tokens (ViTMAE);
  * each source's preprocessing (timm's pretrained_cfg, transformers' preprocessor_config.json)
    against its library's own transform, on real photos.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import timm
import torch
from PIL import Image
from test_preprocessing import PHOTOS, TENSOR_RESIZE_ATOL, _agreement, _cfg_tuple, _pil_backend
from timm.models._hub import save_for_hf

import vitzoo
from vitzoo import registry
from vitzoo.pretrained_cfg import CLIP_MEAN, CLIP_STD
from vitzoo.weights import WeightsFileError, WeightsMismatchError
from vitzoo.weights.keymaps import to_timm, to_vitzoo
from vitzoo.weights.transformers_files import FAMILIES

skimage_data = pytest.importorskip("skimage.data")

ATOL = 1e-5
TINY = dict(embed_dim=64, num_heads=4, depth=2)
HF_TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
# The new families' names and pretrained tags (the default first), as the issue names them.
FAMILY_SOURCES = [
    "deit3_s16.fb_in1k",
    "deit3_b16.fb_in1k",
    "dino_s16.dino",
    "dino_b16.dino",
    "mae_b16.mae",
    "dinov2_s14.lvd142m",
    "dinov2_b14.lvd142m",
    "dinov2_s14_reg.lvd142m",
    "dinov2_b14_reg.lvd142m",
    "clip_b16.openai",
    "clip_b16.laion2b",
    "siglip_b16.webli",
    # issue 23's sizes and families (their other tags: tests/test_zoo.py)
    "deit3_l16.fb_in1k",
    "dinov2_l14_reg.lvd142m",
    "dinov2_g14.lvd142m",
    "clip_l14.laion2b",
    "siglip_so400m14.webli",
    "siglip2_so400m16.v2_webli",
    "radio_b16.c_radio",
]


@pytest.fixture(scope="module")
def photos() -> dict[str, Image.Image]:
    return {name: Image.fromarray(getattr(skimage_data, name)()) for name in PHOTOS}


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Random values everywhere (libraries init zero biases, unit LayerNorms and LayerScale at
    1e-5, which would hide mix-ups), scaled so that 2 blocks stay well-conditioned."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


# ---------------------------------------------------------------------------- timm layout
def timm_reference(name: str) -> str:
    """timm's architecture that computes what `name` ("vitzoo_name.tag") computes: the registered
    timm counterpart, in its QuickGELU variant for OpenAI's CLIP weights."""
    entry, pcfg = registry.get_pretrained_cfg(name)
    assert entry.timm_name is not None and entry.config is not None and pcfg is not None
    act = pcfg.model_args.get("act_layer", entry.config.act_layer)
    return entry.timm_name.replace("_clip_", "_clip_quickgelu_") if act == "quick_gelu" else entry.timm_name


def tiny_args(name: str) -> dict[str, int]:
    """TINY, 96 wide for DINOv2-g (its packed SwiGLU needs an even fc1: int(96 * 2.66667 * 2))."""
    return dict(TINY, embed_dim=96) if name.startswith("dinov2_g") else TINY


def tiny_img(name: str) -> int:
    """A small input size for `name`'s patch size (a 4x4 grid)."""
    entry = registry.get_entry(name)
    assert entry.config is not None
    return 4 * int(entry.config.patch_size)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def tiny_timm(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[torch.nn.Module, Path]]:
    """`tiny_timm("vitzoo_name.tag")`: timm's reference model with random weights, tiny, saved in
    timm's hub layout (config.json stating its model_args, as timm's push_to_hf_hub writes them)."""
    made: dict[str, tuple[torch.nn.Module, Path]] = {}

    def make(name: str) -> tuple[torch.nn.Module, Path]:
        if not timm.is_model(timm_reference(name)):
            pytest.skip(f"timm {timm.__version__} has no {timm_reference(name)} (newer timm has)")
        if name not in made:
            args = dict(tiny_args(name), img_size=tiny_img(name))
            tag = name.split(".")[1]  # the tag's cfg gives timm's class count (0 for feature extractors)
            model = randomise(timm.create_model(f"{timm_reference(name)}.{tag}", **args), len(made))
            out = tmp_path_factory.mktemp(name.replace(".", "-"))
            save_for_hf(model, out, model_args=args, safe_serialization=True)
            made[name] = model, out
        return made[name]

    return make


@pytest.mark.parametrize("name", FAMILY_SOURCES)
def test_timm_hub_repo_and_file_give_timms_output(name, tiny_timm, fake_hub, hf_cache):
    reference, ckpt = tiny_timm(name)
    entry, pcfg = registry.get_pretrained_cfg(name)
    assert pcfg is not None and pcfg.source is not None
    fake_hub.publish_dir(pcfg.source.removeprefix("hf-hub:"), ckpt)  # the repo the registry names
    size = tiny_img(name)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = reference(x)
        from_hub = vitzoo.create(name, **tiny_args(name), img_size=size).eval()  # the tag alone asks for its weights
        assert max_diff(from_hub(x), expected) <= ATOL
        # A bare weights file: the layout and the registered name say everything else.
        from_file = vitzoo.create(
            entry.name, weights=ckpt / "model.safetensors", **tiny_args(name), img_size=size, **pcfg.model_args
        ).eval()
        assert max_diff(from_file(x), expected) <= ATOL
    assert entry.config is not None
    expected_act = pcfg.model_args.get("act_layer", entry.config.act_layer)
    assert (from_hub.config.act_layer, from_hub.config.num_classes) == (expected_act, pcfg.num_classes)
    cfg = from_hub.pretrained_cfg
    assert cfg.source == pcfg.source and cfg.license == pcfg.license and cfg.description == pcfg.description
    assert (cfg.mean, cfg.std, cfg.crop_pct, cfg.interpolation) == (pcfg.mean, pcfg.std, pcfg.crop_pct, "bicubic")


@pytest.mark.parametrize("name", ["clip_b16.laion2b", "dinov2_s14_reg.lvd142m"])
def test_timm_loader_source_says_the_activation_and_position_layout(name, tiny_timm, monkeypatch):
    """A "timm:<name>" source is timm's own model: its MLP activation and position layout are read
    off it (here timm's loader is handed the tiny model instead of downloading a full-size one)."""
    reference, _ = tiny_timm(name)
    monkeypatch.setattr(timm, "create_model", lambda *args, **kwargs: reference)
    size = tiny_img(name)
    base = registry.get_entry(name).name
    model = vitzoo.create(base, weights=f"timm:{timm_reference(name)}", **TINY, img_size=size).eval()
    assert model.config.act_layer == "gelu"  # LAION's exact GELU, though clip_b16's default is QuickGELU
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL


def test_timm_loader_source_reads_swiglu_and_a_remainder_size(monkeypatch):
    """timm:NAME for DINOv2-g (the packed SwiGLU, SiLU) and SigLIP So400m/14 at a size that is no
    multiple of its patch (timm's conv drops the rest): the model read off timm's computes timm's."""
    cases = [
        ("vit_giant_patch14_dinov2", dict(tiny_args("dinov2_g14"), img_size=56), ("swiglu_packed", "silu", False)),
        ("vit_so400m_patch14_siglip_384", dict(TINY, img_size=62), ("mlp", "gelu", True)),
    ]
    references = [randomise(timm.create_model(name, **args), seed) for seed, (name, args, _) in enumerate(cases)]
    for reference, (timm_name, args, expected) in zip(references, cases):
        monkeypatch.setattr(timm, "create_model", lambda *a, reference=reference, **k: reference)
        model = vitzoo.from_pretrained(f"timm:{timm_name}").eval()
        assert (model.config.mlp_layer, model.config.act_layer, model.config.drop_remainder) == expected
        x = torch.randn(1, 3, args["img_size"], args["img_size"])
        with torch.no_grad():
            assert max_diff(model(x), reference(x)) <= ATOL, timm_name


def test_timm_directory_at_a_size_no_multiple_of_the_patch(tmp_path):
    """timm's SigLIP So400m/14 saved at 62 px (4 whole patches of 14): the architecture it names
    says drop_remainder, so the directory alone rebuilds what timm computes."""
    args = dict(TINY, img_size=62)
    reference = randomise(timm.create_model("vit_so400m_patch14_siglip_384", **args), 12)
    save_for_hf(reference, tmp_path / "so400m", model_args=args, safe_serialization=True)
    model = vitzoo.from_pretrained(tmp_path / "so400m").eval()
    x = torch.randn(1, 3, 62, 62)
    with torch.no_grad():
        assert model.config.drop_remainder and max_diff(model(x), reference(x)) <= ATOL


def test_clip_tags_carry_their_activation(tiny_timm, fake_hub, hf_cache):
    """OpenAI's CLIP weights were trained with QuickGELU, LAION's with exact GELU: each tag builds
    its own (the tag's model_args), and the name alone builds the default tag's."""
    assert timm_reference("clip_b16.openai") == "vit_base_patch16_clip_quickgelu_224"
    assert timm_reference("clip_b16.laion2b") == "vit_base_patch16_clip_224"
    _, ckpt = tiny_timm("clip_b16.laion2b")
    fake_hub.publish_dir("timm/vit_base_patch16_clip_224.laion2b", ckpt)
    laion = vitzoo.create("clip_b16.laion2b", **TINY, img_size=64)
    assert laion.config.act_layer == "gelu" and laion.pretrained_cfg.model_args == {"act_layer": "gelu"}
    assert vitzoo.create("clip_b16", **TINY, img_size=64).config.act_layer == "quick_gelu"


def test_timm_checkpoint_keys_of_the_new_families_are_checked(tiny_timm):
    """LayerScale, register, norm_pre and attention-pool keys load; a key no model has is still
    named, and so is a checkpoint for another architecture."""
    _, ckpt = tiny_timm("siglip_b16.webli")
    from safetensors.torch import load_file, save_file

    state = load_file(ckpt / "model.safetensors")
    bad = ckpt.parent / "bad.safetensors"
    save_file({**state, "attn_pool.extra.weight": torch.zeros(2)}, bad)
    with pytest.raises(WeightsMismatchError, match=r"unexpected key\(s\) the model does not have: attn_pool\.extra"):
        vitzoo.create("siglip_b16", weights=bad, **TINY, img_size=64)
    _, reg = tiny_timm("dinov2_s14_reg.lvd142m")
    with pytest.raises(WeightsMismatchError, match=r"pos_embed.*prefix token"):
        vitzoo.create("dinov2_s14", weights=reg / "model.safetensors", **TINY, img_size=56)


def test_from_pretrained_rebuilds_each_family_from_its_timm_directory(tiny_timm):
    """timm's config.json names the architecture; its model_args and the tensors give the rest."""
    for name in ("deit3_s16.fb_in1k", "dinov2_s14_reg.lvd142m", "siglip_b16.webli", "clip_b16.laion2b"):
        reference, ckpt = tiny_timm(name)
        model = vitzoo.from_pretrained(ckpt).eval()
        size = tiny_img(name)
        x = torch.randn(1, 3, size, size)
        with torch.no_grad():
            assert max_diff(model(x), reference(x)) <= ATOL, name


def test_export_to_timm_round_trips_a_family(tiny_timm, tmp_path):
    reference, ckpt = tiny_timm("dinov2_s14_reg.lvd142m")
    model = vitzoo.create("dinov2_s14_reg", weights=ckpt, **TINY, img_size=56)
    vitzoo.export(model, "timm", tmp_path / "out.safetensors")
    back = timm.create_model(
        "vit_small_patch14_reg4_dinov2",
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(tmp_path / "out.safetensors"), custom_load=False),
        **TINY,
        img_size=56,
    ).eval()
    x = torch.randn(1, 3, 56, 56)
    with torch.no_grad():
        assert max_diff(back(x), reference(x)) <= ATOL


# ---------------------------------------------------------------------------- transformers layouts
def _hf(name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name} (newer versions have)")
    return getattr(transformers, name)


def _save(model: torch.nn.Module, directory: Path, processor: dict[str, Any] | None = None) -> Path:
    model.save_pretrained(directory)
    if processor is not None:
        (directory / "preprocessor_config.json").write_text(json.dumps(processor))
    return directory


def test_dinov2_model(tmp_path, fake_hub, hf_cache):
    hf = randomise(_hf("Dinov2Model")(_hf("Dinov2Config")(**HF_TINY, image_size=56, patch_size=14)), 0)
    directory = _save(hf, tmp_path / "dinov2")
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        expected = hf(pixel_values=x).pooler_output
        model = vitzoo.from_pretrained(directory).eval()
        assert max_diff(model(x), expected) <= ATOL
        assert (model.config.init_values, model.config.norm_eps, model.config.mlp_ratio) == (1.0, 1e-6, 4.0)
        fake_hub.publish_dir("facebook/dinov2-small", directory)
        named = vitzoo.create("dinov2_s14", weights="hf-hub:facebook/dinov2-small", **TINY).eval()
        assert named.config.img_size == 56 and max_diff(named(x), expected) <= ATOL


def test_dinov2_with_registers_model(tmp_path, fake_hub, hf_cache):
    """transformers adds positions to [cls, patches] and then inserts the registers; vitzoo (as
    timm) adds them to the patches only, the class token's own position folded into it."""
    Model, Config = _hf("Dinov2WithRegistersModel"), _hf("Dinov2WithRegistersConfig")
    hf = randomise(Model(Config(**HF_TINY, image_size=56, patch_size=14, num_register_tokens=4)), 1)
    directory = _save(hf, tmp_path / "dinov2_reg")
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        expected = hf(pixel_values=x).pooler_output
        model = vitzoo.from_pretrained(directory).eval()
        assert (model.config.reg_tokens, model.config.no_embed_class) == (4, True)
        assert max_diff(model(x), expected) <= ATOL
        fake_hub.publish_dir("facebook/dinov2-with-registers-small", directory)
        named = vitzoo.create("dinov2_s14_reg", weights="hf-hub:facebook/dinov2-with-registers-small", **TINY).eval()
        assert max_diff(named(x), expected) <= ATOL


def test_dinov2_giant_swiglu_model(tmp_path, fake_hub, hf_cache):
    """DINOv2-g's SwiGLU (use_swiglu_ffn): transformers' width rule, gate and input packed into
    fc1 (as timm's SwiGLUPacked) whether the file stores weights_in or 5.x's gate_proj / up_proj."""
    hf_tiny = dict(HF_TINY, hidden_size=96)  # 96 wide, as dinov2_g14's reduced size (tiny_args)
    config = _hf("Dinov2Config")(**hf_tiny, image_size=56, patch_size=14, use_swiglu_ffn=True)
    hf = randomise(_hf("Dinov2Model")(config), 7)
    directory = _save(hf, tmp_path / "dinov2-giant")
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        expected = hf(pixel_values=x).pooler_output
        model = vitzoo.from_pretrained(directory).eval()
        assert max_diff(model(x), expected) <= ATOL
        assert (model.config.mlp_layer, model.config.act_layer) == ("swiglu_packed", "silu")
        assert model.blocks[0].mlp.fc2.in_features == 256  # 2/3 of 4 * 96, rounded up to a multiple of 8
        fake_hub.publish_dir("facebook/dinov2-giant", directory)
        named = vitzoo.create("dinov2_g14", weights="hf-hub:facebook/dinov2-giant", **tiny_args("dinov2_g14")).eval()
        assert max_diff(named(x), expected) <= ATOL
    state = {k.replace("weights_in", "gate_proj"): v for k, v in hf.state_dict().items()}
    assert "layers.0.mlp.gate_proj.weight" in state or "encoder.layer.0.mlp.gate_proj.weight" in state
    with pytest.raises(
        WeightsMismatchError, match=r"mlp\.fc1\.weight cannot be assembled, the up projection is missing"
    ):
        to_vitzoo({k: v for k, v in state.items() if "up_proj" not in k})


def test_siglip_so400m_input_is_no_multiple_of_its_patch(tmp_path):
    """So400m/14 at 384 px: transformers' patch conv, like timm's, drops the pixels past the last
    whole patch; the config's image_size says so (drop_remainder)."""
    so400m = dict(HF_TINY, intermediate_size=int(64 * 3.7362))  # So400m's MLP ratio at the tiny width
    config = _hf("SiglipVisionConfig")(**so400m, image_size=62, patch_size=14)
    hf = randomise(_hf("SiglipVisionModel")(config), 8)
    directory = _save(hf, tmp_path / "siglip-so400m")
    x = torch.randn(2, 3, 62, 62)
    with torch.no_grad():
        model = vitzoo.from_pretrained(directory).eval()
        assert model.config.drop_remainder and model.patch_embed.grid_size == (4, 4)
        assert max_diff(model(x), hf(pixel_values=x).pooler_output) <= ATOL
        named = vitzoo.create("siglip_so400m14", weights=directory, **TINY, img_size=62).eval()
        assert max_diff(named(x), hf(pixel_values=x).pooler_output) <= ATOL


def test_radio_model_and_nvidia_layout(tmp_path):
    """transformers' RadioModel saves NVIDIA's C-RADIO layout: the summary tokens (class token,
    then registers), a Linear patch projection, and a position table for the largest input that is
    cropped to the grid (CPE: bilinear to a square of the longer side, top-left), here 4 x 6 from
    16 x 16. RadioModel normalises its input itself; vitzoo's preprocessing does (norm_mean/std)."""
    Model, Config = _hf("RadioModel"), _hf("RadioConfig")
    config = Config(**HF_TINY, image_size=64, max_img_size=256, layerscale_value=0.5, num_cls_tokens=4, num_registers=4)
    hf = randomise(Model(config), 9)
    with torch.no_grad():  # the patch projection at a realistic scale (tokens of order 1, not 10)
        hf.embeddings.patch_projection.weight.mul_(0.2)
    directory = _save(hf, tmp_path / "radio")
    x = torch.rand(2, 3, 64, 96)
    mean, std = torch.tensor(config.norm_mean).view(1, 3, 1, 1), torch.tensor(config.norm_std).view(1, 3, 1, 1)
    normalised = (x - mean) / std
    with torch.no_grad():
        out = hf(pixel_values=x)
        model = vitzoo.from_pretrained(directory).eval()
        assert (model.config.reg_tokens, model.config.final_norm, model.config.no_embed_class) == (7, False, True)
        assert model.pretrained_cfg.mean == tuple(config.norm_mean) and model.pretrained_cfg.input_size == (3, 64, 64)
        for source in (directory, directory / "model.safetensors"):  # with its config, and NVIDIA's bare file
            named = vitzoo.create("radio_b16", weights=source, **TINY, img_size=(64, 96)).eval()
            tokens = named.forward_features(normalised)
            assert max_diff(tokens, out.last_hidden_state) <= ATOL
            assert max_diff(tokens[:, config.summary_idxs].flatten(1), out.summary) <= ATOL
            assert max_diff(named(normalised), out.last_hidden_state[:, 0]) <= ATOL


def _clip_vision(projection_dim: int = 32, **kw: Any) -> dict[str, Any]:
    return dict(HF_TINY, image_size=64, patch_size=16, projection_dim=projection_dim, **kw)


def test_clip_vision_model_with_projection(tmp_path):
    hf = randomise(_hf("CLIPVisionModelWithProjection")(_hf("CLIPVisionConfig")(**_clip_vision())), 2)
    directory = _save(hf, tmp_path / "clip")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = hf(pixel_values=x).image_embeds
        model = vitzoo.from_pretrained(directory).eval()
        assert max_diff(model(x), expected) <= ATOL
        named = vitzoo.create("clip_b16", weights=directory, **TINY).eval()  # the projection has no bias
        assert max_diff(named(x), expected) <= ATOL
    config = model.config
    assert (config.act_layer, config.norm_eps, config.pre_norm, config.patch_bias) == ("quick_gelu", 1e-5, True, False)
    assert (config.num_classes, config.head_bias) == (32, False)
    # No tensor shows the activation: weights trained with QuickGELU refuse a model with GELU.
    gelu = vitzoo.create("clip_b16", **TINY, img_size=64, num_classes=32, head_bias=False, act_layer="gelu")
    with pytest.raises(
        WeightsMismatchError, match=r"trained with act_layer='quick_gelu', the model has act_layer='gelu'"
    ):
        vitzoo.load_weights(gelu, directory)


def test_clip_model_from_the_hub_is_read_for_its_vision_tower(tmp_path, fake_hub, hf_cache):
    """openai/clip-vit-base-patch16 is a whole CLIPModel (text tower, logit scale): its image
    tower and projection load, the rest is left out; a LAION config's hidden_act "gelu" is kept."""
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    for repo, act in (("openai/clip-vit-base-patch16", "quick_gelu"), ("laion/CLIP-ViT-B-16-laion2B", "gelu")):
        config = _hf("CLIPConfig")(vision_config=_clip_vision(hidden_act=act), text_config=text, projection_dim=32)
        hf = randomise(_hf("CLIPModel")(config), 3)
        fake_hub.publish_dir(repo, _save(hf, tmp_path / repo.replace("/", "-")))
        model = vitzoo.create("clip_b16", weights=f"hf-hub:{repo}", **TINY).eval()
        assert model.config.act_layer == act
        x = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            expected = hf.get_image_features(pixel_values=x)
            expected = getattr(expected, "pooler_output", expected)  # transformers 5 returns an output object
            assert max_diff(model(x), expected) <= ATOL


def test_siglip_vision_model(tmp_path, fake_hub, hf_cache):
    """SigLIP's attention-pooling head packs q, k, v into nn.MultiheadAttention's in_proj."""
    hf = randomise(_hf("SiglipVisionModel")(_hf("SiglipVisionConfig")(**HF_TINY, image_size=64, patch_size=16)), 4)
    directory = _save(hf, tmp_path / "siglip")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = hf(pixel_values=x).pooler_output
        model = vitzoo.from_pretrained(directory).eval()
        assert max_diff(model(x), expected) <= ATOL
        assert (model.config.act_layer, model.config.global_pool) == ("gelu_tanh", "map")
        text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        config = _hf("SiglipConfig")(vision_config=dict(HF_TINY, image_size=64, patch_size=16), text_config=text)
        whole = randomise(_hf("SiglipModel")(config), 5)
        fake_hub.publish_dir("google/siglip-base-patch16-224", _save(whole, tmp_path / "siglip-whole"))
        named = vitzoo.create("siglip_b16", weights="hf-hub:google/siglip-base-patch16-224", **TINY).eval()
        expected = whole.get_image_features(pixel_values=x)
        expected = getattr(expected, "pooler_output", expected)
        assert named.config.act_layer == "gelu_tanh" and max_diff(named(x), expected) <= ATOL


def _siglip2_inputs(x: torch.Tensor, patch: int = 16) -> dict[str, torch.Tensor]:
    """What Siglip2ImageProcessor feeds SigLIP 2 (NaFlex): patches flattened (p, p, C), a mask
    (no padding here) and each image's grid."""
    b, c, h, w = x.shape
    rows, cols = h // patch, w // patch
    patches = x.reshape(b, c, rows, patch, cols, patch).permute(0, 2, 4, 3, 5, 1).reshape(b, rows * cols, -1)
    mask = torch.ones(b, rows * cols, dtype=torch.int32)
    return dict(pixel_values=patches, pixel_attention_mask=mask, spatial_shapes=torch.tensor([[rows, cols]] * b))


def test_siglip2_vision_model_and_siglip2_model(tmp_path, fake_hub, hf_cache):
    """SigLIP 2's NaFlex tower: a Linear patch projection over (p, p, C) patches and a table of
    num_patches positions that transformers resizes to each image's grid (bilinear, antialiased);
    vitzoo builds the model for that grid and resizes the same way once, at load."""
    vision = dict(HF_TINY, num_patches=16, patch_size=16)
    hf = randomise(_hf("Siglip2VisionModel")(_hf("Siglip2VisionConfig")(**vision)), 10)
    directory = _save(hf, tmp_path / "siglip2")
    with torch.no_grad():
        x = torch.randn(2, 3, 64, 64)
        model = vitzoo.from_pretrained(directory).eval()  # the table's own 4 x 4 grid
        assert (model.config.img_size, model.config.act_layer, model.config.global_pool) == (64, "gelu_tanh", "map")
        assert max_diff(model(x), hf(**_siglip2_inputs(x)).pooler_output) <= ATOL
        x = torch.randn(2, 3, 48, 80)  # another grid: 3 x 5
        named = vitzoo.create("siglip2_b16", weights=directory, **TINY, img_size=(48, 80)).eval()
        assert max_diff(named(x), hf(**_siglip2_inputs(x)).pooler_output) <= ATOL
        text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        whole = randomise(_hf("Siglip2Model")(_hf("Siglip2Config")(vision_config=vision, text_config=text)), 11)
        fake_hub.publish_dir("google/siglip2-base-patch16-naflex", _save(whole, tmp_path / "siglip2-whole"))
        repo = "hf-hub:google/siglip2-base-patch16-naflex"
        named = vitzoo.create("siglip2_b16", weights=repo, **TINY, img_size=112).eval()
        x = torch.randn(2, 3, 112, 112)  # a 7 x 7 grid from the table's 4 x 4
        expected = whole.get_image_features(**_siglip2_inputs(x))
        expected = getattr(expected, "pooler_output", expected)
        assert max_diff(named(x), expected) <= ATOL


def test_vit_mae_encoder(tmp_path):
    """ViTMAEModel's forward masks a random 75% of the patches and shuffles the rest; with
    mask_ratio 0 and ascending noise it keeps every patch in order, and is the plain ViT encoder
    that vitzoo loads (ViTMAEForPreTraining's decoder is left out)."""
    config = _hf("ViTMAEConfig")(**HF_TINY, image_size=32, patch_size=16, mask_ratio=0.0)
    for cls in ("ViTMAEModel", "ViTMAEForPreTraining"):
        hf = randomise(_hf(cls)(config), 6)
        directory = _save(hf, tmp_path / cls)
        encoder = hf if cls == "ViTMAEModel" else hf.vit
        x = torch.randn(2, 3, 32, 32)
        noise = torch.arange(4.0).expand(2, 4)
        with torch.no_grad():
            tokens = encoder(pixel_values=x, noise=noise).last_hidden_state
            model = vitzoo.from_pretrained(directory).eval()
            assert max_diff(model.forward_features(x), tokens) <= ATOL
            assert max_diff(model(x), tokens[:, 0]) <= ATOL
            named = vitzoo.create("mae_b16", weights=directory, **TINY).eval()
            assert named.config.norm_eps == 1e-12 and max_diff(named(x), tokens[:, 0]) <= ATOL


def test_transformers_config_defaults_are_transformers_own():
    """config.json files may leave out values equal to their class's defaults; vitzoo's table of
    them must be transformers' own."""
    transformers = pytest.importorskip("transformers")
    classes = {
        "vit": "ViTConfig",
        "deit": "DeiTConfig",
        "vit_mae": "ViTMAEConfig",
        "dinov2": "Dinov2Config",
        "dinov2_with_registers": "Dinov2WithRegistersConfig",
        "clip_vision_model": "CLIPVisionConfig",
        "siglip_vision_model": "SiglipVisionConfig",
        "siglip2_vision_model": "Siglip2VisionConfig",  # transformers >= 4.49
        "vit_msn": "ViTMSNConfig",
        "ijepa": "IJepaConfig",
        "dpt": "DPTConfig",
        "metaclip_2_vision_model": "MetaClip2VisionConfig",
        "chinese_clip_vision_model": "ChineseCLIPVisionConfig",
        "tipsv2_vision_model": "Tipsv2VisionConfig",
        "internvl_vision": "InternVLVisionConfig",
        "beit": "BeitConfig",
        "data2vec-vision": "Data2VecVisionConfig",
        "pixio": "PixioConfig",  # transformers >= 5.0
    }
    # Dinov2Config's patch_size default was 16 in older transformers (4.40), 14 now: vitzoo takes
    # today's; DINOv2's published configs state it, and the patch projection's shape checks it.
    changed = {("dinov2", "patch_size")}
    checked = 0
    for model_type, cls in classes.items():
        if not hasattr(transformers, cls):
            continue  # Dinov2WithRegistersConfig: not in older transformers (4.40)
        defaults = getattr(transformers, cls)().to_dict()
        for key, value in FAMILIES[model_type].defaults.items():
            if key in defaults and (model_type, key) not in changed:  # vision_use_head: transformers >= 4.45
                assert defaults[key] == value, (model_type, key)
                checked += 1
    assert checked > 40


@pytest.mark.parametrize(
    ("family", "change", "error", "match"),
    [
        ("Dinov2", {"hidden_act": "relu"}, WeightsFileError, r"hidden_act='relu' is not supported; expected one of"),
        ("Dinov2", {"mlp_ratio": "wide"}, WeightsFileError, r"mlp_ratio='wide' is invalid"),
        ("Dinov2", {"layerscale_value": "big"}, WeightsFileError, r"layerscale_value='big' is invalid"),
        (
            "Dinov2WithRegisters",
            {"num_register_tokens": 3},
            WeightsMismatchError,
            r"states reg_tokens=3.*have reg_tokens=4",
        ),
    ],
)
def test_unsupported_transformers_settings_are_named_with_their_file(tmp_path, family, change, error, match):
    Model, Config = _hf(f"{family}Model"), _hf(f"{family}Config")
    directory = _save(Model(Config(**HF_TINY, image_size=28, patch_size=14)), tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(error, match=match) as err:
        vitzoo.from_pretrained(directory)
    assert str(directory / "config.json") in str(err.value)


def test_unknown_keys_of_a_clip_layout_are_named():
    Model, Config = _hf("CLIPVisionModel"), _hf("CLIPVisionConfig")
    state = Model(Config(**_clip_vision())).state_dict()
    state["vision_model.encoder.layers.0.adapter.weight"] = torch.zeros(1)
    with pytest.raises(WeightsMismatchError, match=r"CLIP / SigLIP\) layout have no vitzoo counterpart.*adapter"):
        to_vitzoo(state)


def test_export_of_a_head_without_bias_gets_timms_zero_bias():
    state = {"head.weight": torch.ones(3, 4)}
    assert torch.equal(to_timm(state)["head.bias"], torch.zeros(3))


# ---------------------------------------------------------------------------- preprocessing from the source
# The image processors of the hub repositories the issue names, as published.
DINOV2_PROCESSOR = {
    "crop_size": {"height": 224, "width": 224},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.485, 0.456, 0.406],
    "image_processor_type": "BitImageProcessor",
    "image_std": [0.229, 0.224, 0.225],
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"shortest_edge": 256},
}
OPENAI_CLIP_PROCESSOR = {  # the feature-extractor era: sizes as ints, an int size is the short side
    "crop_size": 224,
    "do_center_crop": True,
    "do_normalize": True,
    "do_resize": True,
    "feature_extractor_type": "CLIPFeatureExtractor",
    "image_mean": list(CLIP_MEAN),
    "image_std": list(CLIP_STD),
    "resample": 3,
    "size": 224,
}
SIGLIP_PROCESSOR = {
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "SiglipImageProcessor",
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "SiglipProcessor",
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 224, "width": 224},
}


def _hf_output(hf: torch.nn.Module, processor: Any, output: str):
    def reference(img):
        x = processor(img, return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            return x[0], getattr(hf(pixel_values=x), output)

    return reference


def _both_backends(
    layout: str, model, photos, hf, processor_class: str, directory: Path, output: str, *, short_side: int = 0
) -> None:
    """vitzoo's eval_transform + model against transformers' PIL processor (equal inputs) and its
    default one (transformers 5: torchvision's antialiased resize, a step or two of 1/255 away).

    With a short-side resize (`short_side`) and a centre crop, a margin of an odd number of pixels
    is split differently: transformers' processors floor the offset, torchvision (vitzoo's and
    timm's transforms) rounds it half to even, one pixel apart. Those photos are left out."""
    transformers = pytest.importorskip("transformers")
    crop = model.pretrained_cfg.input_size[1]

    def even_margin(img: Image.Image) -> bool:
        short, long = sorted(img.size)
        return not short_side or (int(short_side * long / short) - crop) % 2 == 0

    pil = _pil_backend(processor_class).from_pretrained(directory)
    even = {name: img for name, img in photos.items() if even_margin(img)}
    assert len(even) >= 4
    _agreement(f"{layout} (PIL)", model, even, _hf_output(hf, pil, output))
    default = transformers.AutoImageProcessor.from_pretrained(directory)
    _agreement(f"{layout} (default)", model, even, _hf_output(hf, default, output), input_atol=TENSOR_RESIZE_ATOL)


def test_dinov2_processor_crops_224_from_the_518_grid(tmp_path, photos):
    """facebook/dinov2-*: trained at 518, processed as resize 256 + centre crop 224; transformers
    resamples the 37x37 position grid to 16x16 for every input. vitzoo builds the model for 224,
    resampling once at load the same way (bicubic, not antialiased): the same pooled feature."""
    from transformers.models.dinov2 import modeling_dinov2

    hf = randomise(_hf("Dinov2Model")(_hf("Dinov2Config")(**HF_TINY, image_size=518, patch_size=14)), 7)
    directory = _save(hf, tmp_path / "dinov2", DINOV2_PROCESSOR)
    model = vitzoo.create("dinov2_s14", weights=directory, **TINY).eval()
    assert model.config.img_size == 224 and model.pos_embed.shape[1] == 1 + 16 * 16
    assert _cfg_tuple(model.pretrained_cfg) == (
        (3, 224, 224),
        (0.485, 0.456, 0.406),
        (0.229, 0.224, 0.225),
        "bicubic",
        224 / 256,
        "center",
    )
    if "scale_factor" in inspect.getsource(modeling_dinov2.Dinov2Embeddings.interpolate_pos_encoding):
        import transformers

        pytest.skip(
            f"transformers {transformers.__version__} resamples DINOv2's positions by a scale factor with DINO's "
            "+0.1 offset (newer versions: to the exact grid size), which vitzoo does not reproduce; the "
            "preprocessing is checked above"
        )
    _both_backends(
        "transformers DINOv2 + BitImageProcessor",
        model,
        photos,
        hf,
        "BitImageProcessor",
        directory,
        "pooler_output",
        short_side=256,
    )
    # The timm release of the same weights is evaluated at 518 (timm's cfg, crop_pct 1.0).
    timm_cfg = registry.get_pretrained_cfg("dinov2_s14")[1]
    assert timm_cfg is not None and (timm_cfg.input_size, timm_cfg.crop_pct) == ((3, 518, 518), 1.0)


def test_clip_processor_resizes_the_short_side_and_crops(tmp_path, photos):
    hf = randomise(
        _hf("CLIPVisionModelWithProjection")(_hf("CLIPVisionConfig")(**dict(_clip_vision(), image_size=224))), 8
    )
    directory = _save(hf, tmp_path / "clip", OPENAI_CLIP_PROCESSOR)
    model = vitzoo.create("clip_b16", weights=directory, **TINY).eval()
    assert _cfg_tuple(model.pretrained_cfg) == ((3, 224, 224), CLIP_MEAN, CLIP_STD, "bicubic", 1.0, "center")
    _both_backends(
        "transformers CLIP + CLIPImageProcessor",
        model,
        photos,
        hf,
        "CLIPImageProcessor",
        directory,
        "image_embeds",
        short_side=224,
    )


def test_siglip_processor_squashes(tmp_path, photos):
    hf = randomise(_hf("SiglipVisionModel")(_hf("SiglipVisionConfig")(**HF_TINY, image_size=224, patch_size=16)), 9)
    directory = _save(hf, tmp_path / "siglip", SIGLIP_PROCESSOR)
    model = vitzoo.create("siglip_b16", weights=directory, **TINY).eval()
    assert _cfg_tuple(model.pretrained_cfg) == ((3, 224, 224), (0.5,) * 3, (0.5,) * 3, "bicubic", 1.0, "squash")
    _both_backends(
        "transformers SigLIP + SiglipImageProcessor",
        model,
        photos,
        hf,
        "SiglipImageProcessor",
        directory,
        "pooler_output",
    )


@pytest.mark.parametrize("name", ["dinov2_s14.lvd142m", "clip_b16.openai", "siglip_b16.webli", "deit3_s16.fb_in1k"])
def test_timm_preprocessing_of_each_family(name, photos):
    """The registered source's cfg is timm's pretrained_cfg of that tag: timm's own transform."""
    entry, pcfg = registry.get_pretrained_cfg(name)
    assert pcfg is not None
    model = vitzoo.create(entry.name, **TINY).eval()
    reference = timm.create_model(f"{timm_reference(name)}.{name.split('.')[1]}", **TINY).eval()
    model.load_state_dict(randomise(reference, 10).state_dict())
    data = timm.data.resolve_model_data_config(reference)
    assert _cfg_tuple(model.pretrained_cfg) == (
        tuple(data["input_size"]),
        tuple(data["mean"]),
        tuple(data["std"]),
        data["interpolation"],
        data["crop_pct"],
        data["crop_mode"],
    )
    tf = timm.data.create_transform(**data)

    def timm_side(img):
        x = tf(img)
        with torch.no_grad():
            return x, reference(x.unsqueeze(0))

    _agreement(f"timm {name} cfg", model, photos, timm_side)
