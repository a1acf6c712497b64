"""The position-embedding picture: cosine similarity on the patch grid, learned or sinusoidal."""

from __future__ import annotations

import torch

from vitzoo.viz.position_embedding import patch_position_embedding, plot_position_embedding, position_similarity


def test_similarity_is_a_cosine_matrix_over_patch_positions(make_vit):
    model = make_vit(distilled=True)  # two prefix tokens whose rows must be left out
    with torch.no_grad():
        model.pos_embed.zero_()
        model.pos_embed[0, :2] = 5.0  # prefix rows: would dominate if they were kept
        model.pos_embed[0, 2:, :16] = torch.eye(16)  # patch k -> one-hot k: orthogonal positions
    assert torch.equal(patch_position_embedding(model), model.pos_embed[0, 2:])
    sim = position_similarity(model)
    assert sim.shape == (4, 4, 4, 4)
    torch.testing.assert_close(sim.reshape(16, 16), torch.eye(16))
    assert sim[1, 1, 1, 1] == 1.0 and sim[1, 1, 1, 2] == 0.0  # grid cell (1, 1) is patch 5, row-major


def test_learned_embedding_similarity_is_symmetric_with_unit_diagonal(make_vit):
    sim = position_similarity(make_vit()).reshape(16, 16)
    torch.testing.assert_close(sim, sim.T)
    torch.testing.assert_close(sim.diagonal(), torch.ones(16))
    assert sim.abs().max() <= 1.0 + 1e-6


def test_sinusoidal_similarity_depends_only_on_the_offset(make_vit):
    # sin(a)sin(b) + cos(a)cos(b) = cos(a - b): for an even width every pair at the same distance
    # along the flattened sequence has the same similarity.
    sim = position_similarity(make_vit(pos_embed="sincos")).reshape(16, 16)
    for offset in (1, 3, 7):
        values = sim.diagonal(offset)
        torch.testing.assert_close(values, values[0].expand_as(values), atol=1e-5, rtol=0)


def test_plot_position_embedding_writes_a_1000x500_png(make_vit, tmp_path, png_size):
    fig = plot_position_embedding(make_vit(), out=tmp_path / "learned.png")
    assert png_size(tmp_path / "learned.png") == (1000, 500)
    assert fig.axes[0].get_title().startswith("learned position embedding")
    fig = plot_position_embedding(make_vit(pos_embed="sincos", patch_size=4), out=tmp_path / "sincos.png")
    assert png_size(tmp_path / "sincos.png") == (1000, 500)
    assert fig.axes[0].get_title().startswith("fixed sinusoidal position embedding")
    # The mosaic shows 8x8 maps of 8x8 cells with one-pixel gaps.
    assert fig.axes[0].images[0].get_array().shape == (8 * 9 - 1, 8 * 9 - 1)
