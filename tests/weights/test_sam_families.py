"""SAM's image encoder through vitzoo's registered names (timm's samvit_*) and from transformers' own
layouts (SamVisionModel, SamModel): the same outputs at reduced depth and width, at the native size
and at another one; the backbone API, features_only, dense_features, vitzoo.optimize, export,
fine-tuning and the pictures on it, or a refusal naming the model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo import deploy, registry
from vitzoo.cli import main
from vitzoo.inference import optimize
from vitzoo.layers.naflex import PatchBatchError
from vitzoo.weights.keymaps import to_timm, to_vitzoo

timm = pytest.importorskip("timm")

NAME = "samvit_b16.sa1b"
ATOL = 1e-5
# depth 2 with block 1 global (the releases' global blocks lie deeper), 96 wide; 256 px: a 16 x 16
# grid in 14 x 14 windows, padded to 28 x 28
REDUCED = dict(depth=2, embed_dim=96, num_heads=2, global_attn_indexes=(1,))
SIZE, OTHER = 256, (320, 192)


def _require() -> None:
    if not timm.is_model("samvit_base_patch16"):
        pytest.skip(f"timm {timm.__version__} has no samvit_base_patch16")


def _timm(num_classes: int = 0) -> torch.nn.Module:
    _require()
    torch.manual_seed(0)
    args = {**REDUCED, "global_attn_indexes": [1]}
    model = timm.create_model("samvit_base_patch16", pretrained=False, img_size=SIZE, num_classes=num_classes, **args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    return model.eval()


def _ours(theirs: torch.nn.Module, **options: object) -> torch.nn.Module:
    model = vitzoo.create(NAME, pretrained=False, img_size=SIZE, **REDUCED, **options).eval()  # type: ignore[arg-type]
    model.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file="timm").state, strict=True)
    return model


def _image(*size: int, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, *size, generator=torch.Generator().manual_seed(sum(size)))


def _tokens(maps: torch.Tensor) -> torch.Tensor:
    return maps.flatten(2).transpose(1, 2)


def test_registered_release_is_timms_model_at_its_size_and_another():
    theirs = _timm(num_classes=5)
    ours = _ours(theirs, num_classes=5)
    assert ours.config.num_params == sum(p.numel() for p in theirs.parameters())
    x, other = _image(SIZE, SIZE), _image(*OTHER)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=ATOL)
        torch.testing.assert_close(ours.forward_features(x), _tokens(theirs.forward_features(x)), rtol=0, atol=ATOL)
        # timm resamples the table and the global blocks' relative tables to any grid; vitzoo with
        # dynamic_img_size per call, or once with set_input_size
        dynamic = _ours(theirs, num_classes=5, dynamic_img_size=True)
        torch.testing.assert_close(dynamic(other), theirs(other), rtol=0, atol=ATOL)
        with pytest.raises(ValueError, match="256"):
            ours(other)  # a fixed-size model names its size
        ours.set_input_size(img_size=OTHER)
        torch.testing.assert_close(ours(other), theirs(other), rtol=0, atol=ATOL)


def test_forward_intermediates_features_only_and_dense_features_are_timms():
    theirs = _timm()
    ours = _ours(theirs)
    x = _image(SIZE, SIZE, batch=1)
    with torch.no_grad():
        for norm in (False, True):  # norm: through the neck, as timm
            final, maps = theirs.forward_intermediates(x, indices=[0, 1], norm=norm)
            our_final, our_maps = ours.forward_intermediates(x, indices=[0, 1], norm=norm)
            torch.testing.assert_close(our_final, _tokens(final), rtol=0, atol=ATOL)
            for a, b in zip(our_maps, maps):
                torch.testing.assert_close(a, b, rtol=0, atol=ATOL)
        features = vitzoo.create(
            NAME, pretrained=False, img_size=SIZE, **REDUCED, features_only=True, out_indices=(0, 1)
        ).eval()
        features.model.load_state_dict(ours.state_dict(), strict=False)  # pruned of its neck and head
        for a, b in zip(features(x), theirs.forward_intermediates(x, indices=[0, 1], intermediates_only=True)):
            torch.testing.assert_close(a, b, rtol=0, atol=ATOL)
        assert [info["num_chs"] for info in ours.feature_info] == [96, 96]
        dense = vitzoo.dense_features(ours, x)  # the last block through the neck: (B, 256, rows, columns)
        torch.testing.assert_close(dense, theirs.forward_features(x), rtol=0, atol=ATOL)


def test_pruning_the_norm_drops_the_neck_as_timm_does():
    theirs = _timm()
    ours = _ours(theirs)
    theirs.prune_intermediate_layers(indices=1, prune_norm=True)
    ours.prune_intermediate_layers(indices=1, prune_norm=True, prune_head=False)
    assert ours.neck is None and ours.config.neck_chans == 0 and ours.num_features == 96
    x = _image(SIZE, SIZE, batch=1)
    with torch.no_grad():
        torch.testing.assert_close(ours.forward_features(x), _tokens(theirs.forward_features(x)), rtol=0, atol=ATOL)


def test_exports_to_timms_layout_and_back():
    theirs = _timm(num_classes=3)
    ours = _ours(theirs, num_classes=3)
    state = to_timm(ours.state_dict())
    assert state["pos_embed"].shape == (1, 16, 16, 96) and "head.fc.weight" in state
    theirs.load_state_dict(state, strict=True)


def test_patch_sequence_batches_and_dynamic_size_export_are_refused_by_name(tmp_path):
    model = vitzoo.create(
        NAME, pretrained=False, img_size=64, depth=1, embed_dim=32, num_heads=2, dynamic_img_size=True
    )
    batch = {"patches": torch.zeros(1, 4, 768), "patch_coord": torch.zeros(1, 4, 2, dtype=torch.long)}
    batch["patch_valid"] = torch.ones(1, 4, dtype=torch.bool)
    with pytest.raises(PatchBatchError, match="SAM's image encoder"):
        model(batch)
    if hasattr(torch.export, "Dim"):  # torch.export programs: torch >= 2.2 (older torch is refused first)
        with pytest.raises(ValueError, match="SAM's image encoder"):
            deploy.export_program(model, tmp_path / "sam.pt2", dynamic_size=True)


@pytest.mark.slow
def test_optimize_and_exported_program_compute_the_model(tmp_path):
    if not hasattr(torch.export, "Dim"):
        pytest.skip(f"torch.export programs need torch >= 2.2; this is torch {torch.__version__}")
    torch.manual_seed(0)
    model = vitzoo.create(NAME, pretrained=False, img_size=64, depth=2, embed_dim=32, num_heads=2, num_classes=4).eval()
    x = _image(64, 64)
    with torch.no_grad():
        expected = model(x)
        fast = optimize(model, x, candidates=["eager-explicit"], cache=False)  # the written-out attention too
        torch.testing.assert_close(fast(x), expected, rtol=0, atol=ATOL)
        path = deploy.export_program(model, tmp_path / "sam.pt2", input_size=(3, 64, 64))
        program = deploy.load_program(path)
        torch.testing.assert_close(program(_image(64, 64, batch=3)), model(_image(64, 64, batch=3)), rtol=0, atol=ATOL)
        traced = torch.fx.symbolic_trace(model)
        torch.testing.assert_close(traced(x), expected, rtol=0, atol=0)


@pytest.mark.slow
def test_onnx_export_runs_in_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = vitzoo.create(NAME, pretrained=False, img_size=64, depth=2, embed_dim=32, num_heads=2).eval()
    path = deploy.export_onnx(model, tmp_path / "sam.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = _image(64, 64)
    (got,) = session.run(None, {"image": x.numpy()})
    with torch.no_grad():
        assert abs(got - model(x).numpy()).max() <= 1e-4


# ----------------------------------------------------------------------------- transformers
def _transformers_sam(tmp_path: Path, whole: bool) -> tuple[torch.nn.Module, Path]:
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "SamVisionModel"):
        pytest.skip(f"transformers {transformers.__version__} has no SamVisionModel (4.43 has)")
    vision = dict(
        hidden_size=96, num_hidden_layers=3, num_attention_heads=2, image_size=128, window_size=3,
        global_attn_indexes=[1], output_channels=32, mlp_dim=200,
    )  # fmt: skip
    torch.manual_seed(0)
    if whole:
        config = transformers.SamConfig(vision_config=vision)
        model = transformers.SamModel(config).eval()
    else:
        model = transformers.SamVisionModel(transformers.SamVisionConfig(**vision)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    model.save_pretrained(tmp_path / "sam")
    return model, tmp_path / "sam"


@pytest.mark.parametrize(
    "whole", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["SamVisionModel", "SamModel"]
)
def test_transformers_sam_image_encoder_from_its_own_layout(tmp_path, whole):
    reference, directory = _transformers_sam(tmp_path, whole)
    ours = vitzoo.from_pretrained(directory).eval()
    c = ours.config
    assert (c.window_size, c.global_attn_indexes, c.use_rel_pos, c.neck_chans, c.norm_eps) == (3, (1,), True, 32, 1e-6)
    x = _image(128, 128, batch=1)
    with torch.no_grad():
        encoder = reference.get_image_embeddings(x) if whole else reference(x).last_hidden_state
        torch.testing.assert_close(ours.forward_features(x), _tokens(encoder), rtol=0, atol=ATOL)
        torch.testing.assert_close(ours(x), encoder.mean(dim=(2, 3)), rtol=0, atol=ATOL)


# ----------------------------------------------------------------------------- fine-tuning, pictures
@pytest.fixture
def tiny_sam():
    """A tiny copy of the release: 32 px, 8 px patches (a 4 x 4 grid) in 3 x 3 windows, block 1 global."""
    vitzoo.register(
        "test_tiny_sam", base="samvit_b16", override=True, img_size=32, patch_size=8, embed_dim=16, depth=2,
        num_heads=2, window_size=3, global_attn_indexes=(1,), neck_chans=8,
    )  # fmt: skip
    yield "test_tiny_sam"
    registry.unregister("test_tiny_sam")


@pytest.mark.slow
def test_finetune_lowers_the_loss_and_the_pictures_draw(tiny_sam, mnist_dir, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--data", "mnist", "--data-dir", str(mnist_dir), "--no-download", "--epochs", "3", "--batch-size", "32"]
    assert main(["finetune", tiny_sam, *args, "--lr", "3e-3", "--out", str(out), "--no-progress"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train_loss"] for r in records if "train_loss" in r]
    assert len(losses) == 3 and losses[-1] < losses[0] and all(math.isfinite(v) for v in losses)
    image = tmp_path / "digit.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(image)
    weights = ["--weights", str(out / "best")]
    attention = [
        "viz",
        "attention",
        tiny_sam,
        "--image",
        str(image),
        *weights,
        "--out",
        str(tmp_path / "attention.png"),
    ]
    assert main(attention) == 0
    assert main(["viz", "pca", tiny_sam, str(image), *weights, "--size", "32", "--out", str(tmp_path / "pca.png")]) == 0
    assert (tmp_path / "attention.png").is_file() and (tmp_path / "pca.png").is_file()
