"""The 2D rotary position embedding: each variant equals timm's own module (timm's numerics are
the checkpoints'), prefix tokens stay unrotated, and the rotation is one."""

from __future__ import annotations

import math

import pytest
import torch

from vitzoo.layers.rope import RotaryEmbedding2d, apply_rope, init_mixed_freqs, rope_coords

timm_rope = pytest.importorskip("timm.layers.pos_embed_sincos")


def _timm_has(name: str, *arguments: str) -> None:
    """Skip, naming timm's version, where the installed timm lacks `name` or its `arguments`
    (timm 1.0.3, the oldest pin, predates DINOv3's and RoPE-ViT's embeddings and PE's options)."""
    import inspect

    import timm

    target = getattr(timm_rope, name, None)
    missing = [a for a in arguments if target is not None and a not in inspect.signature(target).parameters]
    if target is None or missing:
        pytest.skip(f"timm {timm.__version__} has no {name}({', '.join(missing)}) to compare with")


def _rope(kind: str, grid: tuple[int, int], prefix: int = 0, **kw) -> RotaryEmbedding2d:
    return RotaryEmbedding2d(kind, head_dim=32, num_heads=2, depth=3, grid=grid, num_prefix_tokens=prefix, **kw)


CAT_CASES = [
    pytest.param({}, id="eva02"),  # EVA-02 also rescales to its reference grid (below)
    pytest.param({"grid_indexing": "xy", "grid_offset": 1.0, "ref_feat_shape": (24, 24)}, id="pe"),
    pytest.param({"grid_indexing": "xy", "temperature": 100.0}, id="rope_vit"),
    pytest.param({"ref_feat_shape": (16, 16), "rotate_half": True}, id="half"),
]


@pytest.mark.parametrize("kw", CAT_CASES)
def test_cat_equals_timm(kw):
    _timm_has("RotaryEmbeddingCat", *kw)
    timm_kw = {"temperature": 10000.0, **kw}
    ours = _rope("cat", (7, 9), prefix=2, **kw)
    cached = timm_rope.RotaryEmbeddingCat(dim=32, in_pixels=False, feat_shape=[7, 9], **timm_kw)
    dynamic = timm_rope.RotaryEmbeddingCat(dim=32, in_pixels=False, feat_shape=None, **timm_kw)
    assert torch.equal(ours.get_embed()[2:], cached.get_embed())
    assert torch.equal(ours.get_embed((5, 12))[2:], dynamic.get_embed(shape=[5, 12]))


DINOV3_CASES = [
    pytest.param({"temperature": 100.0}, id="base"),
    pytest.param({"temperature": 100.0, "normalize_coords": "max"}, id="max"),
    pytest.param({"min_period": 0.5, "max_period": 90.0}, id="periods"),
]


@pytest.mark.parametrize("kw", DINOV3_CASES)
def test_dinov3_equals_timm(kw):
    _timm_has("RotaryEmbeddingDinoV3")
    timm_kw = {"temperature": None, **kw}
    ours = _rope("dinov3", (12, 20), prefix=5, rotate_half=True, **kw)
    theirs = timm_rope.RotaryEmbeddingDinoV3(dim=32, feat_shape=[12, 20], rotate_half=True, **timm_kw)
    assert torch.equal(ours.get_embed()[5:], theirs.get_embed())
    assert torch.equal(ours.get_embed((6, 9))[5:], theirs.get_embed(shape=[6, 9]))


def test_dinov3_coordinates_are_patch_centres_in_minus_one_one():
    coords = rope_coords((2, 4), centered=True)
    assert coords[..., 0].unique().tolist() == [-0.5, 0.5]  # rows: centres 0.5, 1.5 of 2
    assert coords[0, :, 1].tolist() == [-0.75, -0.25, 0.25, 0.75]


def test_augmentation_equals_timm_in_training_and_is_off_in_eval():
    _timm_has("RotaryEmbeddingDinoV3")
    aug = {"shift_coords": 0.1, "jitter_coords": 1.2, "rescale_coords": 2.0}
    ours = _rope("dinov3", (8, 8), temperature=100.0, rotate_half=True, **aug)
    theirs = timm_rope.RotaryEmbeddingDinoV3(dim=32, feat_shape=[8, 8], temperature=100.0, **aug)
    ours.train(), theirs.train()
    torch.manual_seed(3)
    expected = theirs.get_embed()
    torch.manual_seed(3)
    assert torch.equal(ours.get_embed(), expected)
    ours.eval()
    plain = _rope("dinov3", (8, 8), temperature=100.0, rotate_half=True)
    assert torch.equal(ours.get_embed(), plain.get_embed())  # eval: no draw, the plain positions
    assert not torch.equal(ours.get_embed(), expected)


def test_mixed_equals_timm():
    _timm_has("RotaryEmbeddingMixed")
    torch.manual_seed(0)
    theirs = timm_rope.RotaryEmbeddingMixed(
        dim=64, depth=3, num_heads=2, temperature=10.0, feat_shape=[7, 9], grid_indexing="xy"
    )
    torch.manual_seed(0)
    ours = _rope("mixed", (7, 9), prefix=1, temperature=10.0, grid_indexing="xy")
    assert torch.equal(ours.freqs, theirs.freqs)  # the same initialisation, the same draws
    assert ours.get_embed().shape == (3, 2, 1 + 63, 64)
    assert torch.equal(ours.get_embed()[:, :, 1:], theirs.get_embed())
    assert torch.equal(ours.get_embed((4, 5))[:, :, 1:], theirs.get_embed(shape=[4, 5]))
    assert torch.equal(ours.for_block(ours.get_embed(), 2), ours.get_embed()[2])
    assert ours.no_weight_decay() == {"freqs"}


def test_mixed_init_is_timms_formula():
    _timm_has("init_random_2d_freqs")
    torch.manual_seed(1)
    expected = timm_rope.init_random_2d_freqs(32, 3, 2, temperature=10.0)
    torch.manual_seed(1)
    assert torch.equal(init_mixed_freqs(32, 3, 2, 10.0), expected)


@pytest.mark.parametrize("rotate_half", [False, True])
def test_apply_leaves_prefix_tokens_and_equals_timm_on_patches(rotate_half):
    _timm_has("apply_rot_embed_cat", "half")
    rope = _rope("cat", (7, 9), prefix=3, rotate_half=rotate_half)
    q = torch.randn(2, 2, 3 + 63, 32)
    out = apply_rope(q, rope.get_embed(), rotate_half)
    assert torch.equal(out[:, :, :3], q[:, :, :3])  # class and register tokens: not rotated, exactly
    expected = timm_rope.apply_rot_embed_cat(q[:, :, 3:], rope.get_embed()[3:], half=rotate_half)
    assert torch.equal(out[:, :, 3:], expected)


def test_rotation_keeps_norms_and_scores_depend_on_the_offset_only():
    rope = _rope("cat", (6, 6))
    embed = rope.get_embed().view(6, 6, -1)
    q, k = torch.randn(32, dtype=torch.float64), torch.randn(32, dtype=torch.float64)

    def score(a: tuple[int, int], b: tuple[int, int]) -> float:
        qa = apply_rope(q.view(1, 1, 1, -1), embed[a].double().view(1, -1))
        kb = apply_rope(k.view(1, 1, 1, -1), embed[b].double().view(1, -1))
        torch.testing.assert_close(qa.norm(), q.norm())
        return float((qa * kb).sum())

    assert math.isclose(score((0, 1), (2, 4)), score((3, 1), (5, 4)), rel_tol=1e-5)
    assert not math.isclose(score((0, 1), (2, 4)), score((0, 1), (2, 5)), rel_tol=1e-3)


def test_set_grid_gives_the_embedding_of_a_module_built_for_that_grid():
    rope = _rope("cat", (7, 9), prefix=1, ref_feat_shape=(16, 16))
    rope.set_grid((10, 4))
    assert rope.grid == (10, 4)
    assert torch.equal(rope.get_embed(), _rope("cat", (10, 4), prefix=1, ref_feat_shape=(16, 16)).get_embed())


def test_cached_embedding_follows_the_model_dtype():
    rope = _rope("cat", (4, 4)).to(torch.bfloat16)
    assert rope.get_embed().dtype == torch.bfloat16
    assert rope.get_embed((4, 5)).dtype == torch.float32  # computed now: float32, the rotation casts back


@pytest.mark.parametrize(
    ("kind", "head_dim", "kw", "message"),
    [
        ("spiral", 32, {}, "rope='spiral' is invalid; expected one of 'cat', 'mixed', 'dinov3'"),
        ("cat", 30, {}, "needs a head width (embed_dim / num_heads) divisible by 4, got 30"),
        ("mixed", 32, {"rotate_half": True}, "rope='mixed' cannot be combined with rope_rotate_half=True"),
        ("cat", 32, {"grid_indexing": "yx"}, "rope_grid_indexing='yx' is invalid; expected 'ij' or 'xy'"),
        ("dinov3", 32, {"normalize_coords": "mean"}, "rope_normalize_coords='mean' is invalid"),
    ],
)
def test_bad_arguments_are_named(kind, head_dim, kw, message):
    with pytest.raises(ValueError) as err:
        RotaryEmbedding2d(kind, head_dim=head_dim, num_heads=1, depth=1, grid=(2, 2), **kw)
    assert message in str(err.value)
