"""timm's relpos ViT (relative position bias from an MLP, per block or shared; `rpn`: post-norm) and
the post-norm ViTs (timm's ResPostBlock, EVA-02-CLIP-E's EvaBlockPostNorm), through their registered
names: timm's model at a reduced depth and width with random weights loads key by key and computes
what vitzoo's does, at the native size and at another one (relpos: timm's set_input_size against
vitzoo's, as neither offers dynamic_img_size there; the others: timm's dynamic_img_size against
vitzoo's and its set_input_size). Then the backbone
API (forward_intermediates, features_only, dense_features), vitzoo.optimize, export, a few training
steps and the pictures on a tiny relpos model."""

from __future__ import annotations

import pytest
import torch

import vitzoo
from vitzoo import registry
from vitzoo.data import DataSplits, load_mnist_sample
from vitzoo.weights.keymaps import to_vitzoo

timm = pytest.importorskip("timm")

ATOL = 1e-5
REDUCED = dict(depth=2, embed_dim=96, num_heads=3)
OTHER = (160, 192)  # another input size: a 10 x 12 grid of 16-pixel patches
# (vitzoo name, timm architecture): per-block and shared bias, class token, class token + average
# pooling, post-norm with relative bias, ViT-B/32+ post-norm, timm's post-norm ViT and EVA's.
CASES = [
    ("vit_relpos_s16", "vit_relpos_small_patch16_224"),
    ("vit_srelpos_s16", "vit_srelpos_small_patch16_224"),
    ("vit_relpos_medium16_cls", "vit_relpos_medium_patch16_cls_224"),
    ("vit_relpos_b16_clsgap", "vit_relpos_base_patch16_clsgap_224"),
    ("vit_relpos_medium16_rpn", "vit_relpos_medium_patch16_rpn_224"),
    ("vit_relpos_b32_plus_rpn_256", "vit_relpos_base_patch32_plus_rpn_256"),
    ("vit_b16_rpn", "vit_base_patch16_rpn_224"),
    ("eva02_enormous14_clip", "eva02_enormous_patch14_clip_224"),
]


def _timm(arch: str, **args: object) -> torch.nn.Module:
    if not timm.is_model(arch):
        pytest.skip(f"timm {timm.__version__} has no {arch}")
    torch.manual_seed(0)
    model = timm.create_model(arch, pretrained=False, **REDUCED, **args).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    return model


def _ours(name: str, theirs: torch.nn.Module, **fields: object) -> torch.nn.Module:
    num_classes = int(getattr(theirs, "num_classes", 0))
    ours = vitzoo.create(name, pretrained=False, num_classes=num_classes, **REDUCED, **fields).eval()
    ours.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=name).state, strict=True)
    return ours


def _needs(model: torch.nn.Module, method: str) -> None:
    """A skip naming the installed timm where its model predates `method` (the oldest pinned, 1.0.3)."""
    if not hasattr(model, method):
        pytest.skip(f"timm {timm.__version__}'s {type(model).__name__} has no {method} (newer timm has)")


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max())


def _image(size: tuple[int, int], seed: int = 1) -> torch.Tensor:
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(seed))


# The default run: the post-norm relpos model (per-block bias); `-m slow`: every layout.
PARAMS = [pytest.param(*c, id=c[0], marks=() if c[0] == "vit_relpos_medium16_rpn" else pytest.mark.slow) for c in CASES]


@pytest.mark.parametrize("name, arch", PARAMS)
def test_registered_name_computes_timms_output_at_its_size_and_another(name, arch):
    relpos = "relpos" in arch
    theirs = _timm(arch, **({} if relpos else {"dynamic_img_size": True}))
    ours = _ours(name, theirs)
    dynamic = None if relpos else _ours(name, theirs, dynamic_img_size=True)
    x = _image(tuple(theirs.patch_embed.img_size))
    with torch.no_grad():
        expected = theirs(x)
        assert _max_diff(ours(x), expected) <= ATOL
        patch = theirs.patch_embed.patch_size[0]
        other = _image((10 * patch, 12 * patch), seed=2)
        if relpos:
            _needs(theirs, "set_input_size")  # the native size is proved above on any timm
            theirs.set_input_size(img_size=other.shape[-2:])
        expected = theirs(other)
        if dynamic is not None:
            assert _max_diff(dynamic(other), expected) <= ATOL
        ours.set_input_size(img_size=tuple(other.shape[-2:]))
        assert _max_diff(ours(other), expected) <= ATOL


@pytest.mark.slow
def test_forward_intermediates_and_features_only_equal_timms():
    theirs = _timm("vit_relpos_medium_patch16_cls_224")
    _needs(theirs, "forward_intermediates")
    ours = _ours("vit_relpos_medium16_cls", theirs)
    x = _image((224, 224))
    with torch.no_grad():
        final, maps = theirs.forward_intermediates(x, indices=[0, 1], return_prefix_tokens=True)
        got_final, got = ours.forward_intermediates(x, indices=[0, 1], return_prefix_tokens=True)
        assert _max_diff(got_final, final) <= ATOL
        for (m, p), (gm, gp) in zip(maps, got):
            assert gm.shape == m.shape == (2, 96, 14, 14) and _max_diff(gm, m) <= ATOL and _max_diff(gp, p) <= ATOL
        features = vitzoo.create(
            "vit_relpos_medium16_cls", pretrained=False, features_only=True, out_indices=(0, 1), **REDUCED
        ).eval()  # eval: the bias MLP's dropout is off
        features.model.load_state_dict(ours.state_dict(), strict=False)
        for got_map, (m, _) in zip(features(x), maps):
            assert _max_diff(got_map, m) <= ATOL


def test_dense_features_at_another_size_follow_timms_set_input_size():
    theirs = _timm("vit_srelpos_small_patch16_224")
    _needs(theirs, "set_input_size")
    ours = _ours("vit_srelpos_s16", theirs)
    x = _image(OTHER)
    with pytest.raises(ValueError, match="rel_pos_mlp=384 cannot be combined with dynamic_img_size"):
        vitzoo.dense_features(ours, x)  # a size per call: refused by name, as timm offers none
    with torch.no_grad():
        theirs.set_input_size(img_size=OTHER)
        (expected,) = theirs.forward_intermediates(x, indices=1, norm=True, intermediates_only=True)
        ours.set_input_size(img_size=OTHER)
        got = vitzoo.dense_features(ours, x)
    assert got.shape == (2, 96, 10, 12) and _max_diff(got, expected) <= ATOL


def test_patch_sequences_and_dynamic_img_size_are_refused_by_name():
    ours = vitzoo.create("vit_relpos_s16", pretrained=False, depth=1, embed_dim=48, num_heads=2)
    assert "relative position bias MLP (rel_pos_mlp=128)" in (ours.patch_sequence_refusal() or "")
    with pytest.raises(ValueError, match="rel_pos_mlp=128 cannot be combined with dynamic_img_size=True"):
        vitzoo.create("vit_relpos_s16", pretrained=False, depth=1, dynamic_img_size=True)


def _tiny(name: str = "vit_relpos_medium16_rpn", **fields: object) -> torch.nn.Module:
    torch.manual_seed(0)
    fields = {"img_size": 64, "depth": 2, "embed_dim": 32, "num_heads": 2, **fields}
    return vitzoo.create(name, pretrained=False, **fields).eval()


@pytest.mark.slow
def test_optimize_and_export_compute_the_same():

    model, x = _tiny(), _image((64, 64))
    with torch.no_grad():
        expected = model(x)
        assert (
            _max_diff(vitzoo.optimize(model, x, cache=False, candidates=["eager", "eager-explicit"])(x), expected)
            <= 1e-4
        )
    traced = torch.fx.symbolic_trace(model)
    assert _max_diff(traced(x), expected) <= ATOL


@pytest.mark.slow
def test_torch_export_program_at_its_size(tmp_path):
    from vitzoo import deploy

    if not hasattr(torch.export, "Dim"):
        pytest.skip(f"torch {torch.__version__} has no torch.export.Dim (torch >= 2.2)")
    model = _tiny("vit_srelpos_s16")
    path = deploy.export(model, tmp_path / "relpos.pt2")
    program = deploy.load_program(path)
    x = _image((64, 64))
    with torch.no_grad():
        assert _max_diff(program(x), model(x)) <= 1e-4


@pytest.mark.slow
def test_onnx_runs_in_onnxruntime(tmp_path):
    from vitzoo import deploy

    ort = pytest.importorskip("onnxruntime")
    model, x = _tiny(), _image((64, 64))
    path = deploy.export(model, tmp_path / "relpos.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"image": x.numpy()})
    with torch.no_grad():
        assert _max_diff(torch.from_numpy(got), model(x)) <= 1e-4


@pytest.mark.slow
def test_a_few_training_steps_lower_the_loss(tmp_path):
    from vitzoo.train import TrainConfig, fit

    full = load_mnist_sample()
    pick = lambda labels, n: torch.cat([torch.nonzero(labels == c).flatten()[:n] for c in range(10)]).sort().values  # noqa: E731
    splits = DataSplits(
        train=full.train.subset(pick(full.train.labels, 20)),
        val=full.val.subset(pick(full.val.labels, 5)),
        name="mnist-sample",
        kind="digits",
    )
    model = _tiny("vit_relpos_medium16_rpn", img_size=28, patch_size=7, in_chans=1, num_classes=10)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = TrainConfig(epochs=2, batch_size=20, lr=3e-3, progress=False, seed=7)
        result = fit(model.train(), splits, config=config, out_dir=tmp_path / "run")
    finally:
        torch.set_num_threads(previous)
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]


@pytest.fixture
def tiny_registered():
    vitzoo.list_models()
    saved = registry.snapshot()
    vitzoo.register("test_relpos_tiny", base="vit_relpos_medium16_cls", img_size=64, embed_dim=32, num_heads=2, depth=2)
    yield "test_relpos_tiny"
    registry.restore(saved)


@pytest.mark.slow
def test_attention_and_pca_pictures(tiny_registered, tmp_path):
    from PIL import Image

    from vitzoo.cli import main

    image = tmp_path / "x.png"
    pixels = torch.randint(0, 256, (64, 64, 3), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    Image.fromarray(pixels.numpy()).save(image)  # texture everywhere: a foreground for the PCA
    out = tmp_path / "attention.png"
    assert main(["viz", "attention", tiny_registered, "--image", str(image), "--layer", "1", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    out = tmp_path / "pca.png"
    assert main(["viz", "pca", tiny_registered, str(image), "--size", "64", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
