"""timm's parallel-block, differential-attention and C-RADIO NaFlexVit releases through vitzoo's
registered names (issue 45): timm's model with random weights at reduced depth and width, its
state dict loaded key by key, the outputs compared at the native size and at another; the backbone
API, the exports and `vitzoo.optimize` on the new blocks; a few fine-tuning steps and the pictures.

    vit_pwee     ParallelScalingBlock (layers/parallel_block.py)
    vit_dpwee    DiffParallelScalingBlock (parallel block + differential attention)
    vit_dwee, vit_dlittle   pre-norm blocks with DiffAttention (layers/diff_attention.py)
    naflexvit_*_radio_v3/v4 the C-RADIO table resized by pos_resample "radio" / "radio_corners"
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import vitzoo
from vitzoo import zoo
from vitzoo.layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES
from vitzoo.weights.keymaps import to_vitzoo

timm = pytest.importorskip("timm")
ATOL = 1e-5
TINY = dict(depth=2, embed_dim=64, num_heads=2)
VIT_ARCHS = [
    "vit_pwee_patch16_reg1_gap_256",
    "vit_dpwee_patch16_reg1_gap_256",
    "vit_dwee_patch16_reg1_gap_256",
    "vit_dlittle_patch16_reg1_gap_256",
]
RADIO_ARCHS = {"naflexvit_base_patch16_radio_v3": "radio_corners", "naflexvit_large_patch16_radio_v3": "radio"}
slow = pytest.mark.slow
# The default run: the parallel block, the differential one and DiffAttention in a pre-norm block,
# each at one size; `-m slow` every architecture at both.
DEFAULT_PARITY = {(VIT_ARCHS[0], 256), (VIT_ARCHS[1], 128), (VIT_ARCHS[2], 256)}
PARITY = [
    pytest.param(arch, size, marks=() if (arch, size) in DEFAULT_PARITY else slow, id=f"{arch}-{size}")
    for arch in VIT_ARCHS
    for size in (256, 128)
]


def registered(arch: str) -> str:
    """vitzoo's name of timm's architecture (the generated table's, tests/zoo/test_timm_releases.py)."""
    if not timm.is_model(arch):
        pytest.skip(f"timm {timm.__version__} has no {arch} (timm >= 1.0.20)")
    names = {
        m.name for m in zoo.MODELS for cfg in m.pretrained.values() if cfg.extra.get("timm", "").startswith(f"{arch}.")
    }
    assert len(names) == 1, f"{arch} is registered as {sorted(names)}"
    return names.pop()


def randomise(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def twin(arch: str, **args: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """timm's `arch` with random weights and vitzoo's registered name holding them."""
    name = registered(arch)  # skips where this timm lacks the architecture
    theirs = randomise(timm.create_model(arch, pretrained=False, **TINY, **args))
    ours = vitzoo.create(name, pretrained=False, **TINY, **args).eval()
    ours.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=arch).state, strict=True)
    return theirs, ours


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


def relative_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over max(1, max |b|): C-RADIO has no final norm, its tokens reach several units."""
    return max_diff(a, b) / max(1.0, b.abs().max().item())


@pytest.mark.parametrize("arch, size", PARITY)
def test_registered_name_computes_timms_output(arch, size):
    theirs, ours = twin(arch, img_size=size, num_classes=7)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert max_diff(ours(x), theirs(x)) <= ATOL
        assert max_diff(ours.forward_features(x), theirs.forward_features(x)) <= ATOL
        args = dict(indices=[0, 1], output_fmt="NCHW", intermediates_only=True)
        for a, b in zip(ours.forward_intermediates(x, **args), theirs.forward_intermediates(x, **args)):
            assert max_diff(a, b) <= ATOL


@pytest.mark.parametrize("arch", [pytest.param(VIT_ARCHS[0], marks=slow), VIT_ARCHS[1]])
def test_parallel_models_at_another_size_after_set_input_size(arch):
    theirs, ours = twin(arch, img_size=128)
    if not hasattr(theirs, "set_input_size"):
        pytest.skip(f"timm {timm.__version__} has no set_input_size (newer timm has)")
    theirs.set_input_size(img_size=(96, 160))
    ours.set_input_size(img_size=(96, 160))
    x = torch.randn(1, 3, 96, 160)
    with torch.no_grad():
        assert max_diff(ours(x), theirs(x)) <= ATOL


def radio_batch(sizes: list[tuple[int, int]], length: int) -> dict[str, torch.Tensor]:
    """Random images of `sizes` cut into 16-pixel patches (row, column, channel) and padded."""
    g = torch.Generator().manual_seed(0)
    batch = {
        PATCHES: torch.zeros(len(sizes), length, 16 * 16 * 3),
        PATCH_COORD: torch.zeros(len(sizes), length, 2, dtype=torch.int64),
        PATCH_VALID: torch.zeros(len(sizes), length, dtype=torch.bool),
    }
    for i, (h, w) in enumerate(sizes):
        rows, cols = h // 16, w // 16
        image = torch.randn(3, h, w, generator=g)
        patches = image.reshape(3, rows, 16, cols, 16).permute(1, 3, 2, 4, 0).reshape(rows * cols, -1)
        grid = torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), -1)
        n = rows * cols
        batch[PATCHES][i, :n], batch[PATCH_COORD][i, :n], batch[PATCH_VALID][i, :n] = patches, grid.reshape(n, 2), True
    return batch


@slow
@pytest.mark.parametrize("arch", sorted(RADIO_ARCHS))
def test_radio_naflex_at_the_released_table_and_input_size(arch):
    """The released 128 x 128 table (2048 px) resized to the 512 px input's 32 x 32 grid."""
    name = registered(arch)  # skips where this timm lacks the architecture
    theirs = randomise(timm.create_model(arch, pretrained=False, **TINY))
    ours = vitzoo.create(name, pretrained=False, **TINY).eval()
    ours.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=arch).state, strict=True)
    x = torch.randn(1, 3, 512, 512)
    with torch.no_grad():
        assert relative_diff(ours.forward_features(x), theirs.forward_features(x)) <= ATOL


@pytest.mark.parametrize(
    "arch", [pytest.param(a, marks=() if v == "radio_corners" else slow) for a, v in sorted(RADIO_ARCHS.items())]
)
def test_radio_naflex_table_resampling_equals_timms(arch):
    """The table (8 x 8 here) resized bilinearly to a square of the longer side, not antialiased,
    top-left kept: up and down, square and not, images and patch sequences."""
    theirs, ours = _radio_twin(arch)
    assert ours.config.pos_resample == RADIO_ARCHS[arch] and ours.config.dynamic_img_size
    with torch.no_grad():
        for hw in [(128, 128), (64, 64), (48, 80), (160, 96)]:  # its own grid, smaller, wide, larger and tall
            x = torch.randn(2, 3, *hw)
            assert relative_diff(ours.forward_features(x), theirs.forward_features(x)) <= ATOL
        batch = radio_batch([(64, 64), (32, 112), (160, 96), (128, 128)], length=64)
        valid, p = batch[PATCH_VALID], ours.num_prefix_tokens
        mine = ours.forward_features(batch)[PATCHES]
        timms = theirs.forward_features(batch[PATCHES], batch[PATCH_COORD], batch[PATCH_VALID])[PATCHES]
        assert relative_diff(mine[:, :p], timms[:, :p]) <= ATOL
        assert relative_diff(mine[:, p:][valid], timms[:, p:][valid]) <= ATOL


def _radio_twin(arch: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    name = registered(arch)  # skips where this timm lacks the architecture
    theirs = randomise(timm.create_model(arch, pretrained=False, pos_embed_grid_size=(8, 8), **TINY))
    ours = vitzoo.create(name, pretrained=False, img_size=128, **TINY).eval()
    ours.load_state_dict(to_vitzoo(dict(theirs.state_dict()), file=arch).state, strict=True)
    return theirs, ours


def test_radio_releases_join_the_radio_family_with_timms_preprocessing():
    name = registered("naflexvit_so400m_patch16_radio_v4")
    info = vitzoo.model_info(name)
    assert info["family"] == "radio" and info["config"]["pos_resample"] == "radio"
    assert info["config"]["img_size"] in (2048, [2048, 2048], (2048, 2048))  # the released 128 x 128 table
    _, cfg = vitzoo.registry.get_pretrained_cfg(f"{name}.c_radio")
    assert cfg is not None and tuple(cfg.input_size) == (3, 512, 512) and cfg.license == "nvidia-open-model-license"


# ------------------------------------------------------------------ the backbone API and exports
@pytest.fixture(scope="module")
def dpwee() -> torch.nn.Module:
    """A small dpwee (parallel + differential blocks) with random weights."""
    torch.manual_seed(0)
    return randomise(vitzoo.create(registered("vit_dpwee_patch16_reg1_gap_256"), img_size=64, **TINY))


def test_features_only_and_dense_features(dpwee):
    x = torch.randn(1, 3, 64, 64)
    feats = vitzoo.create(registered("vit_dpwee_patch16_reg1_gap_256"), img_size=64, features_only=True, **TINY)
    feats.load_state_dict(dpwee.state_dict(), strict=False)
    maps = feats.eval()(x)
    assert [tuple(m.shape) for m in maps] == [(1, 64, 4, 4)] * len(maps)
    dense = vitzoo.dense_features(dpwee, torch.randn(1, 3, 96, 64), layers=2, concat=True)
    assert tuple(dense.shape) == (1, 128, 6, 4)


@slow
def test_optimize_and_exports(dpwee, tmp_path):
    from vitzoo import deploy

    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = dpwee(x)
    fast = vitzoo.optimize(dpwee, x, candidates=["eager", "eager-explicit"], cache=False)
    with torch.no_grad():
        assert max_diff(fast(x), expected) <= ATOL
    program = deploy.load_program(deploy.export(dpwee, tmp_path / "dpwee.pt2"))
    with torch.no_grad():
        assert max_diff(program(x), expected) <= ATOL
    ort = pytest.importorskip("onnxruntime")
    path = deploy.export(dpwee, tmp_path / "dpwee.onnx")
    (got,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": x.numpy()})
    assert max_diff(torch.from_numpy(got), expected) <= 1e-4


def test_lora_on_parallel_blocks_is_refused_by_name(dpwee):
    from vitzoo.layers.lora import add_lora

    with pytest.raises(ValueError, match="parallel block"):
        add_lora(dpwee, rank=2)


# ------------------------------------------------------------------ fine-tuning and pictures
@slow
@pytest.mark.parametrize("arch", ["vit_dpwee_patch16_reg1_gap_256", "vit_pwee_patch16_reg1_gap_256"])
def test_a_tiny_copy_fine_tunes_on_the_mnist_sample_and_draws_its_pictures(arch, tmp_path):
    from vitzoo.data import DataSplits, load_mnist_sample
    from vitzoo.train import TrainConfig, fit
    from vitzoo.viz import plot_attention, plot_pca

    full = load_mnist_sample()
    idx = torch.arange(160)
    data = DataSplits(train=full.train.subset(idx), val=full.val.subset(idx[:40]), name="mnist-sample", kind="digits")
    torch.manual_seed(0)
    tiny = dict(img_size=28, patch_size=7, in_chans=1, num_classes=10, embed_dim=16, depth=2, num_heads=2)
    model = vitzoo.create(registered(arch), **tiny)
    config = TrainConfig(epochs=3, batch_size=32, lr=3e-3, progress=False, seed=3)
    result = fit(model, data, config=config, out_dir=tmp_path / "run")
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    model.eval()
    plot_attention(model, torch.rand(1, 28, 28), what="rollout", out=tmp_path / "attention.png")
    plot_pca(model, [torch.rand(1, 28, 28), torch.rand(1, 28, 42)], out=tmp_path / "pca.png")
    assert all((tmp_path / f"{kind}.png").read_bytes()[:4] == b"\x89PNG" for kind in ("attention", "pca"))
