"""open_clip's CoCa image towers through vitzoo's registered names (openclip_coca_vit_b32 / _l14):
open_clip's own CoCa model at reduced depth and width with random weights, saved in open_clip's
layout and read by vitzoo's open_clip reader, computes open_clip's image embedding and caption
tokens; the paper's "parallel" / "cascade" arrangements too; the backbone API, features_only,
dense_features, export and fine-tuning work, and what does not is refused by name."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import vitzoo
from vitzoo import deploy, registry
from vitzoo.cli import main
from vitzoo.errors import VitzooError
from vitzoo.layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES
from vitzoo.model import ViTConfig
from vitzoo.text.keymaps import split_open_clip
from vitzoo.text.load import read_open_clip_tower
from vitzoo.weights import load_checkpoint
from vitzoo.weights.files import read_checkpoint
from vitzoo.weights.shapes import infer_config_fields
from vitzoo.weights.verify import check_stated

open_clip = pytest.importorskip("open_clip")
coca_model = pytest.importorskip("open_clip.coca_model")
OPEN_CLIP_VERSION = getattr(open_clip, "__version__", None) or open_clip.version.__version__

ATOL = 1e-5
RELEASES = {"coca_ViT-B-32": "coca_ViT-B-32.laion2b_s13b_b90k", "coca_ViT-L-14": "coca_ViT-L-14.laion2b_s13b_b90k"}
# open_clip's vision_cfg at reduced size; its pooler 16 wide (embed_dim) over 64-wide tokens, 8 heads
VISION = {"layers": 2, "width": 64, "head_width": 32, "patch_size": 8, "image_size": 32}
SIZES = {"depth": 2, "embed_dim": 64, "num_heads": 2, "patch_size": 8, "img_size": 32, "num_classes": 16}
SIZES_WITH_POOL = {**SIZES, "coca_dim": 16}


def _reduced_coca(model: str, folder: Path, **vision: Any) -> torch.nn.Module:
    """open_clip's CoCa at reduced sizes with random weights, saved in open_clip's layout."""
    from safetensors.torch import save_file

    cfg = json.loads(json.dumps(open_clip.get_model_config(model)))
    cfg.pop("custom_text", None)
    cfg["vision_cfg"].update(VISION, **vision)
    cfg["text_cfg"].update(layers=1, width=32, heads=2)
    cfg["multimodal_cfg"].update(layers=1, width=32, heads=2)
    cfg["embed_dim"] = 16
    torch.manual_seed(0)
    coca = coca_model.CoCa(**cfg).eval()
    with torch.no_grad():
        for p in coca.parameters():
            p.normal_(0, 0.1)
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": {**cfg, "custom_text": True}}))
    save_file({k: v.contiguous() for k, v in coca.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    return coca


def _image(batch: int = 2, size: int = 32) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(batch + size))


def _theirs(coca: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """open_clip's image embedding (B, E) and caption tokens ("parallel" / "cascade" pool to (B, 1, E))."""
    embedding, tokens = coca.visual(x)
    return embedding.reshape(x.shape[0], -1), tokens


def _through_the_name(model: str, folder: Path, **sizes: Any) -> torch.nn.Module:
    """The registered release built at the reduced sizes, filled by vitzoo's open_clip tower reader."""
    ckpt = read_open_clip_tower(folder)
    ours = vitzoo.create(RELEASES[model], pretrained=False, **(sizes or SIZES_WITH_POOL)).eval()
    assert ours.config == ViTConfig(**ckpt.config)  # the reader's config is the name's at these sizes
    ours.load_state_dict(ckpt.state, strict=True)
    return ours


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return float((a - b).abs().max())


@pytest.mark.parametrize("model", sorted(RELEASES))
def test_registered_release_computes_open_clips_embedding_and_caption_tokens(model, tmp_path):
    theirs = _reduced_coca(model, tmp_path / "ckpt")
    ours = _through_the_name(model, tmp_path / "ckpt")
    assert ours.config.global_pool == "coca" and ours.config.coca_pool_type == ""
    x = _image()
    with torch.no_grad():
        embedding, tokens = _theirs(theirs, x)
        pooled, caption = ours.pool_with_tokens(ours.forward_features(x))
        diffs = (_max_diff(ours(x), embedding), _max_diff(ours.head(pooled), embedding), _max_diff(caption, tokens))
    print(f"{model}: max |diff| embedding {diffs[0]:.2e}, caption tokens {diffs[2]:.2e}")
    assert caption.shape == (2, 255, 16)
    assert max(diffs) <= ATOL


def test_pooler_as_wide_as_the_tokens_reads_open_clips_packed_in_proj(tmp_path):
    """width == embed_dim: nn.MultiheadAttention keeps one in_proj_weight, split into q and kv."""
    theirs = _reduced_coca("coca_ViT-B-32", tmp_path / "ckpt", width=16, head_width=8)
    assert "visual.attn_pool.attn.in_proj_weight" in theirs.state_dict()
    ours = _through_the_name("coca_ViT-B-32", tmp_path / "ckpt", **{**SIZES, "embed_dim": 16, "coca_dim": None})
    assert ours.config.coca_dim is None
    x = _image()
    with torch.no_grad():
        embedding, tokens = _theirs(theirs, x)
        assert _max_diff(ours(x), embedding) <= ATOL
        assert _max_diff(ours.pool_with_tokens(ours.forward_features(x))[1], tokens) <= ATOL


@pytest.mark.parametrize("kind", ["parallel", "cascade"])
def test_the_papers_arrangements_compute_open_clips(kind, tmp_path):
    """open_clip's attentional_pool="parallel" / "cascade" (its WIP arrangements, which run only where
    the pooler is as wide as the tokens): read with the contrastive pooler, the norm on the tokens."""
    theirs = _reduced_coca("coca_ViT-B-32", tmp_path / "ckpt", width=16, head_width=8, attentional_pool=kind)
    if getattr(theirs.visual, "attn_pool_contrastive", None) is None:
        pytest.skip(f"open_clip {OPEN_CLIP_VERSION} has no attentional_pool={kind!r} (one pooler for any value)")
    ckpt = read_open_clip_tower(tmp_path / "ckpt")
    assert ckpt.config["coca_pool_type"] == kind and "norm.weight" in ckpt.state
    ours = vitzoo.VisionTransformer(ViTConfig(**ckpt.config)).eval()
    ours.load_state_dict(ckpt.state, strict=True)
    x = _image()
    with torch.no_grad():
        embedding, tokens = _theirs(theirs, x)
        pooled, caption = ours.pool_with_tokens(ours.forward_features(x))
        assert caption.shape == (2, 256, 16)
        assert max(_max_diff(ours.head(pooled), embedding), _max_diff(caption, tokens)) <= ATOL
        assert _max_diff(ours(x), embedding) <= ATOL


def test_text_tower_is_refused_by_name(tmp_path):
    _reduced_coca("coca_ViT-B-32", tmp_path / "ckpt")
    with pytest.raises(VitzooError, match=r"text_cfg\.embed_cls=True is not supported"):
        vitzoo.create(RELEASES["coca_ViT-B-32"], text=True, weights=tmp_path / "ckpt")


@pytest.fixture
def restored_registry():
    saved = registry.snapshot()
    yield
    registry.restore(saved)


def test_pretrained_loads_the_tower_from_the_hub(tmp_path, fake_hub, hf_cache, restored_registry):
    """`create(name, pretrained=True)` of a CoCa release reads open_clip's own repository: a reduced
    copy published on the local Hub under a registered name and an open_clip spelling."""
    theirs = _reduced_coca("coca_ViT-B-32", tmp_path / "ckpt")
    fake_hub.publish_dir("laion/tiny-coca", tmp_path / "ckpt")
    cfg = registry.resolve(RELEASES["coca_ViT-B-32"]).pretrained_cfg
    assert cfg is not None
    base = vitzoo.create(RELEASES["coca_ViT-B-32"], pretrained=False, **SIZES_WITH_POOL).config
    registry.register(
        "tiny_coca", base=base, pretrained={"laion": cfg.replace(source="hf-hub:laion/tiny-coca", model_args={})}
    )
    registry.register_alias("Tiny-CoCa.laion", "tiny_coca.laion", kind="open_clip")
    model = vitzoo.create("Tiny-CoCa.laion", pretrained=True).eval()
    x = _image()
    with torch.no_grad():
        assert _max_diff(model(x), _theirs(theirs, x)[0]) <= ATOL


def test_a_mismatched_pooler_is_named(tmp_path):
    _reduced_coca("coca_ViT-B-32", tmp_path / "ckpt")
    config = tmp_path / "ckpt" / "open_clip_config.json"
    raw = json.loads(config.read_text())
    raw["model_cfg"]["vision_cfg"]["attn_pooler_queries"] = 128
    config.write_text(json.dumps(raw))
    ckpt = read_open_clip_tower(tmp_path / "ckpt")
    with pytest.raises(VitzooError, match=r"attn_pool\.caption\.query"):
        load_checkpoint(vitzoo.VisionTransformer(ViTConfig(**ckpt.config)), ckpt, strict=True)
    whole = read_checkpoint(tmp_path / "ckpt" / "open_clip_model.safetensors")
    state = split_open_clip({k: v for k, v in whole.items() if k.startswith("visual.")}, file="f").visual
    stated = ViTConfig(**ckpt.config).to_dict()
    with pytest.raises(
        VitzooError, match=r"coca_queries=128, but .* coca_queries=256 \(from attn_pool\.caption\.query\)"
    ):
        check_stated(stated, infer_config_fields(state), state, config="open_clip_config.json", weights="f")


# ----------------------------------------------------------------------------- backbone API, export
def test_intermediates_features_only_and_dense_features(tmp_path):
    theirs = _reduced_coca("coca_ViT-B-32", tmp_path / "ckpt")
    if not hasattr(theirs.visual, "forward_intermediates"):
        pytest.skip(f"open_clip {OPEN_CLIP_VERSION} has no forward_intermediates")
    ours = _through_the_name("coca_ViT-B-32", tmp_path / "ckpt")
    x = _image()
    with torch.no_grad():
        maps = ours.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
        expected = theirs.visual.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
        for a, b in zip(maps, expected["image_intermediates"]):
            assert _max_diff(a, b) <= ATOL
        final, _ = ours.forward_intermediates(x, indices=[1])
        torch.testing.assert_close(final, ours.forward_features(x))  # un-normed: the norm is the pool's
        dense = vitzoo.dense_features(ours, x, layers=[1])
        torch.testing.assert_close(dense[0], maps[1])
    features = vitzoo.create(
        RELEASES["coca_ViT-B-32"], pretrained=False, features_only=True, out_indices=(0, 1), **SIZES_WITH_POOL
    ).eval()
    features.model.load_state_dict({k: v for k, v in ours.state_dict().items() if k in features.model.state_dict()})
    with torch.no_grad():
        for a, b in zip(features(x), maps):
            torch.testing.assert_close(a, b)


def test_pruning_and_reset_classifier(tmp_path):
    _reduced_coca("coca_ViT-B-32", tmp_path / "ckpt")
    ours = _through_the_name("coca_ViT-B-32", tmp_path / "ckpt")
    ours.reset_classifier(3)
    assert ours.head.in_features == 16 and ours(_image()).shape == (2, 3)
    with pytest.raises(ValueError, match="invalid for a model built with global_pool='coca'"):
        ours.reset_classifier(3, global_pool="avg")
    pruned = _through_the_name("coca_ViT-B-32", tmp_path / "ckpt")
    pruned.prune_intermediate_layers(indices=1, prune_norm=True, prune_head=False)
    assert isinstance(pruned.attn_pool.norm, torch.nn.Identity) and not pruned.config.final_norm
    pruned.prune_intermediate_layers(indices=1)
    c = pruned.config
    assert pruned.attn_pool is None and (c.global_pool, c.coca_dim, c.num_classes) == ("", None, 0)


def test_config_fields_validate_together():
    with pytest.raises(ValueError, match="coca_queries=8 with global_pool='token' is invalid"):
        ViTConfig(coca_queries=8)
    with pytest.raises(ValueError, match="coca_pool_type="):
        ViTConfig(global_pool="coca", coca_pool_type="serial")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attn_pool_num_heads"):
        ViTConfig(global_pool="coca", coca_dim=20, attn_pool_num_heads=8)
    with pytest.raises(ValueError, match="cannot be combined with fc_norm=True"):
        ViTConfig(global_pool="coca", fc_norm=True)
    with pytest.raises(ValueError, match="distilled=True cannot be combined with global_pool='coca'"):
        ViTConfig(global_pool="coca", distilled=True)


def _tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return vitzoo.create(RELEASES["coca_ViT-B-32"], pretrained=False, **SIZES_WITH_POOL, coca_queries=4).eval()


def test_patch_sequence_batch_computes_the_image():
    model = _tiny_model()
    x = _image(batch=1)
    patches = x.reshape(1, 3, 4, 8, 4, 8).permute(0, 2, 4, 3, 5, 1).reshape(1, 16, 192)
    coord = torch.stack(torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij"), -1).reshape(1, 16, 2)
    pad = {PATCHES: torch.cat([patches, torch.zeros(1, 3, 192)], 1), PATCH_COORD: torch.cat([coord, coord[:, :3]], 1)}
    pad[PATCH_VALID] = torch.arange(19).reshape(1, 19) < 16
    with torch.no_grad():
        torch.testing.assert_close(model(pad), model(x), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_exported_program_and_onnx_compute_the_model(tmp_path):
    if not hasattr(torch.export, "Dim"):
        pytest.skip(f"torch.export programs need torch >= 2.2; this is torch {torch.__version__}")
    model = _tiny_model()
    x = _image()
    with torch.no_grad():
        expected = model(x)
        program = deploy.load_program(deploy.export_program(model, tmp_path / "coca.pt2"))
        torch.testing.assert_close(program(_image(3)), model(_image(3)), rtol=0, atol=ATOL)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(
        str(deploy.export_onnx(model, tmp_path / "coca.onnx")), providers=["CPUExecutionProvider"]
    )
    (got,) = session.run(None, {"image": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=0, atol=1e-4)


# ----------------------------------------------------------------------------- fine-tuning
@pytest.fixture
def tiny_coca():
    vitzoo.register(
        "test_tiny_coca", base="openclip_coca_vit_b32", override=True, img_size=32, patch_size=8, embed_dim=16,
        depth=2, num_heads=2, coca_dim=16, attn_pool_num_heads=2, coca_queries=4,
    )  # fmt: skip
    yield "test_tiny_coca"
    registry.unregister("test_tiny_coca")


@pytest.mark.slow
def test_finetune_lowers_the_loss(tiny_coca, mnist_dir, tmp_path):
    out = tmp_path / "run"
    args = ["--data", "mnist", "--data-dir", str(mnist_dir), "--no-download", "--epochs", "3", "--batch-size", "32"]
    assert main(["finetune", tiny_coca, *args, "--lr", "3e-3", "--out", str(out), "--no-progress"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train_loss"] for r in records if "train_loss" in r]
    assert len(losses) == 3 and losses[-1] < losses[0] and all(math.isfinite(v) for v in losses)


@pytest.mark.parametrize(
    ("vision", "match"),
    [
        ({"attentional_pool": "serial"}, r"attentional_pool='serial' is not supported \(False, True, 'parallel'"),
        ({"attentional_pool": True, "pool_type": "avg"}, r"pool_type='avg' with attentional_pool=True"),
        ({"attentional_pool": True, "attn_pooler_queries": 0}, r"attn_pooler_queries=0 is invalid"),
    ],
)
def test_open_clip_pool_options_vitzoo_does_not_compute_are_refused(vision, match):
    from vitzoo.text.open_clip_config import parse_image_tower

    with pytest.raises(VitzooError, match=match):
        parse_image_tower({"model_cfg": {"embed_dim": 16, "vision_cfg": vision}}, "cfg")
