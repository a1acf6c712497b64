"""vitzoo/zoo/open_clip_releases.py, proved against the installed open_clip: every generated release
is reachable by open_clip's name, is preprocessed as open_clip preprocesses it, has the image tower
vitzoo's open_clip reader gives it and open_clip's parameter count, and a random open_clip model at
reduced size, saved in open_clip's layout, computes open_clip's image features through the name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo import registry, zoo
from vitzoo.text.load import image_tower_config
from vitzoo.text.open_clip_config import parse_image_tower
from vitzoo.zoo.open_clip_releases import ARCHITECTURES, LEFT_OUT, RELEASES, TEXT_REFUSED

open_clip = pytest.importorskip("open_clip")
OPEN_CLIP_VERSION = getattr(open_clip, "__version__", None) or open_clip.version.__version__
# The table states open_clip 3.x's configs and preprocessing; older open_clip (the oldest pin, 2.24)
# describes some releases otherwise, so the comparisons against it need the version it came from.
GENERATED_FROM = (3, 3)

ROWS = {f"{row[0]}.{row[1]}": row for row in RELEASES}
# One open_clip model of each option set in the default run (`-m slow`, in CI, counts every one).
SAMPLED = ("ViT-B-32", "ViT-B-16-quickgelu", "ViT-L-14-CLIPA-336", "ViT-B-16-SigLIP2-256", "PE-Core-T-16-384")
EVERY_MODEL = [pytest.param(m, marks=pytest.mark.slow) if m not in SAMPLED else m for m in sorted(ARCHITECTURES)]
# Reduced towers of open_clip's own ViT for the forward check: plain, QuickGELU, CLIPA's options.
REDUCED = {"layers": 2, "width": 64, "head_width": 32, "patch_size": 8, "image_size": 32}
FORWARD = ("ViT-B-32", "ViT-B-16-quickgelu", "ViT-H-14-CLIPA-336")
# Releases whose image tower is a timm trunk (open_clip's TimmModel builds it by name): SigLIP 2's
# L/16 at 512 px (tanh GELU, unlike L/16's other sizes), So400m/16 at 384 and 512 px, and MobileCLIP 2's
# L/14 (timm's GELU CLIP: open_clip's quick_gelu never reaches a timm trunk), their trunks reduced.
TIMM_FORWARD = ("ViT-L-16-SigLIP2-512", "ViT-SO400M-16-SigLIP2-384", "ViT-SO400M-16-SigLIP2-512", "MobileCLIP2-L-14")
TIMM_TRUNK = {"depth": 2, "embed_dim": 64}  # the head count (16) is the architecture's: 4 wide each


def _require(name: str) -> None:
    if tuple(int(p) for p in OPEN_CLIP_VERSION.split(".")[:2]) < GENERATED_FROM:
        pytest.skip(f"open_clip {OPEN_CLIP_VERSION} predates the table's open_clip 3.3 (its configs differ)")
    model, _, tag = name.partition(".")
    if (model, tag) not in open_clip.list_pretrained():
        pytest.skip(f"open_clip {OPEN_CLIP_VERSION} has no release {name} (the table came from another)")


def test_every_generated_release_is_registered_under_open_clips_name():
    for name, row in ROWS.items():
        assert zoo.OPEN_CLIP_NAMES[name] == row[-1]
        resolved = registry.resolve(name)
        assert f"{resolved.entry.name}.{resolved.pretrained_cfg.tag}" == row[-1]
        assert resolved.pretrained_cfg.extra == {"open_clip": name}
        assert resolved.pretrained_cfg.source == f"hf-hub:{row[2]}"
        assert resolved.source_kind in ("open_clip", "timm")
    assert len(set(zoo.OPEN_CLIP_NAMES.values())) == len(zoo.OPEN_CLIP_NAMES)
    assert not set(LEFT_OUT) & set(ROWS)
    assert set(TEXT_REFUSED) <= set(ROWS)


def test_a_new_model_is_named_from_open_clips_and_joined_ones_keep_their_names():
    assert zoo.OPEN_CLIP_NAMES["ViT-L-14-CLIPA.datacomp1b"] == "openclip_vit_l14_clipa.datacomp1b"
    assert vitzoo.model_info("openclip_vit_l14_clipa")["family"] == "clip"
    # the same tower as timm's CLIP B/32 (exact GELU, no projection bias): one more tag of it
    assert zoo.OPEN_CLIP_NAMES["ViT-B-32.laion2b_s34b_b79k"] == "vit_b32_clip.laion2b_s34b_b79k"


def _open_clip_preprocess(model: str, tag: str) -> dict[str, Any]:
    """What open_clip's create_model sets as the model's preprocess_cfg for a pretrained tag."""
    from open_clip.transform import PreprocessCfg, merge_preprocess_dict

    cfg = merge_preprocess_dict(PreprocessCfg(), open_clip.get_pretrained_cfg(model, tag))
    cfg["size"] = open_clip.get_model_config(model)["vision_cfg"].get("image_size", 224)
    return cfg


@pytest.mark.parametrize("name", sorted(ROWS))
def test_release_is_preprocessed_as_open_clip_does(name):
    _require(name)
    model, tag = ROWS[name][:2]
    theirs = _open_clip_preprocess(model, tag)
    ours = registry.resolve(name).pretrained_cfg
    size = theirs["size"]
    assert ours.input_size[1:] == ((size, size) if isinstance(size, int) else tuple(size))
    assert (ours.mean, ours.std) == (tuple(theirs["mean"]), tuple(theirs["std"]))
    assert ours.interpolation == theirs["interpolation"]
    assert ours.crop_mode == {"shortest": "center", "squash": "squash"}[theirs["resize_mode"]]
    assert ours.crop_pct == 1.0


def _width(config: dict[str, Any]) -> dict[str, Any]:
    """The config with its MLP ratio as the width it gives (configs round the ratio differently)."""
    return {**config, "mlp_ratio": int(config["embed_dim"] * config["mlp_ratio"])}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_registered_tower_is_the_one_vitzoos_reader_gives(name):
    _require(name)
    model = ROWS[name][0]
    tower = parse_image_tower({"model_cfg": open_clip.get_model_config(model)}, model)
    expected = image_tower_config(tower, model).to_dict()
    ours = registry.resolve(name)
    config = ours.entry.resolve_config().replace(**ours.pretrained_cfg.model_args).to_dict()
    assert _width(config) == _width(expected)


@pytest.mark.parametrize("model", EVERY_MODEL)
def test_parameter_count_equals_open_clips_image_tower(model):
    name = next(n for n, row in ROWS.items() if row[0] == model)
    _require(name)
    cfg = open_clip.get_model_config(model)
    with torch.device("meta"):  # the image tower alone (a Hugging Face text tower would be downloaded)
        theirs = open_clip.model._build_vision_tower(cfg["embed_dim"], cfg["vision_cfg"], cfg.get("quick_gelu", False))
    assert vitzoo.model_info(ROWS[name][-1])["num_params"] == sum(p.numel() for p in theirs.parameters())


def _reduced_open_clip(model: str, folder: Path) -> torch.nn.Module:
    """open_clip's model at REDUCED sizes with random weights, saved in open_clip's layout."""
    cfg = json.loads(json.dumps(open_clip.get_model_config(model)))
    cfg["vision_cfg"].update(REDUCED)
    cfg["text_cfg"].update(layers=1, width=32, heads=2)
    cfg["embed_dim"] = 16
    torch.manual_seed(0)
    return _saved(open_clip.model.CLIP(**cfg).eval(), cfg, folder)


def _saved(clip: torch.nn.Module, cfg: dict[str, Any], folder: Path) -> torch.nn.Module:
    """`clip` with random weights, saved in open_clip's layout with its config."""
    from safetensors.torch import save_file

    with torch.no_grad():
        for p in clip.parameters():
            p.normal_(0, 0.1)
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    save_file({k: v.contiguous() for k, v in clip.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    return clip


@pytest.mark.parametrize("model", FORWARD)
def test_reduced_release_computes_open_clips_image_features(model, tmp_path):
    """open_clip's random model, saved as open_clip saves it, read whole (text=True) and built through
    the registered name at the same reduced size: the image features agree with open_clip's (fp32)."""
    name = next(n for n, row in ROWS.items() if row[0] == model)
    _require(name)
    theirs = _reduced_open_clip(model, tmp_path / "ckpt")
    whole = vitzoo.create(name, text=True, weights=tmp_path / "ckpt")
    sizes = {"depth": 2, "embed_dim": 64, "num_heads": 2, "patch_size": 8, "img_size": 32, "num_classes": 16}
    ours = vitzoo.create(name, pretrained=False, **sizes).eval()
    ours.load_state_dict(whole.visual.state_dict(), strict=True)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = theirs.encode_image(x)
        torch.testing.assert_close(whole.visual(x), expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-5)


def _reduced_timm_tower_clip(model: str, size: int, folder: Path, monkeypatch: pytest.MonkeyPatch) -> torch.nn.Module:
    """open_clip's model of `model`'s own config (its custom text tower reduced) whose timm trunk
    open_clip builds at TIMM_TRUNK and `size` px, random weights, saved in open_clip's layout."""
    timm = pytest.importorskip("timm")
    cfg = json.loads(json.dumps(open_clip.get_model_config(model)))
    del cfg["custom_text"]
    cfg["vision_cfg"]["image_size"] = size
    cfg["text_cfg"].update(layers=1, width=32, heads=2)
    if "hf_tokenizer_name" in cfg["text_cfg"]:  # SigLIP's vocabulary, not found offline (CLIP's BPE is vitzoo's)
        cfg["text_cfg"]["vocab_size"] = 64
    cfg["embed_dim"] = 16
    create_model = timm.create_model  # open_clip's TimmModel names the trunk only: its sizes added here
    monkeypatch.setattr(timm, "create_model", lambda name, **kw: create_model(name, **kw, **TIMM_TRUNK, img_size=size))
    torch.manual_seed(0)
    clip = open_clip.model.CustomTextCLIP(**cfg).eval()
    monkeypatch.undo()
    assert type(clip.visual).__name__ == "TimmModel" and len(clip.visual.trunk.blocks) == TIMM_TRUNK["depth"]
    return _saved(clip, cfg, folder)


@pytest.mark.parametrize("model", TIMM_FORWARD)
def test_reduced_timm_tower_release_computes_open_clips_image_features(model, tmp_path, monkeypatch):
    """open_clip's model of the release's config, its timm trunk reduced, read whole (text=True) and
    built through the registered name at the same size: the image features agree (fp32)."""
    name = next(n for n, row in ROWS.items() if row[0] == model)
    _require(name)
    config = registry.resolve(name).config
    assert config is not None
    size = 4 * int(config.patch_size)  # type: ignore[call-overload]
    theirs = _reduced_timm_tower_clip(model, size, tmp_path / "ckpt", monkeypatch)
    whole = vitzoo.create(name, text=True, weights=tmp_path / "ckpt")
    sizes = {**TIMM_TRUNK, "img_size": size, "num_classes": 16 if config.num_classes else 0}
    ours = vitzoo.create(name, pretrained=False, **sizes).eval()
    ours.load_state_dict(whole.visual.state_dict(), strict=True)
    assert whole.visual.config.act_layer == ours.config.act_layer == config.act_layer
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = theirs.encode_image(x)
        # 1e-6: exact GELU for tanh GELU moves these features by 4e-6, QuickGELU for GELU by 1e-3
        torch.testing.assert_close(whole.visual(x), expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-6)


@pytest.fixture
def restored_registry():
    saved = registry.snapshot()
    yield
    registry.restore(saved)


def test_pretrained_loads_the_image_tower_of_open_clips_layout_from_the_hub(
    tmp_path, fake_hub, hf_cache, restored_registry
):
    """`create(name, pretrained=True)` of an open_clip release reads the image tower of its own
    repository (open_clip_config.json and open_clip_model.safetensors, no model.safetensors): a
    reduced ViT-B-32 published on the local Hub under a registered name and open_clip spelling."""
    theirs = _reduced_open_clip("ViT-B-32", tmp_path / "ckpt")
    fake_hub.publish_dir("laion/tiny-open-clip", tmp_path / "ckpt")
    whole = vitzoo.create("ViT-B-32.laion2b_s34b_b79k", text=True, weights=tmp_path / "ckpt")
    cfg = registry.resolve("ViT-B-32.laion2b_s34b_b79k").pretrained_cfg
    assert cfg is not None
    registry.register(
        "tiny_open_clip",
        base=whole.visual.config,
        pretrained={"laion": cfg.replace(source="hf-hub:laion/tiny-open-clip", model_args={})},
    )
    registry.register_alias("Tiny-OpenCLIP.laion", "tiny_open_clip.laion", kind="open_clip")
    assert registry.resolve("Tiny-OpenCLIP.laion").source_kind == "open_clip"
    model = vitzoo.create("Tiny-OpenCLIP.laion", pretrained=True).eval()
    assert model.pretrained_cfg.mean == cfg.mean
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(x), theirs.encode_image(x), rtol=0, atol=1e-5)
