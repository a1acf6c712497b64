"""Seeing inside a Vision Transformer: patches, embeddings and attention as pictures.

    from vitzoo import viz
    model = vitzoo.create("vit_mnist", weights="run/best")        # any registered model
    viz.plot_patches("digit.png", patch_size=4, out="patches.png")
    viz.plot_patch_embedding(model, "digit.png", out="embedding.png")
    viz.plot_position_embedding(model, out="posembed.png")
    viz.plot_attention(model, "digit.png", layer=-1, out="attention.png")
    viz.plot_curves("run/metrics.jsonl", out="curves.png")
    viz.plot_pca(model, ["a.jpg", "b.jpg"], size=448, out="pca.png")   # DINOv3's PCA pictures
    viz.plot_similarity(model, ["a.jpg"], query=(12, 20), out="similarity.png")

Every `plot_*` returns a matplotlib Figure and, given `out`, writes it as a PNG (atomically).
The numbers behind the pictures are plain functions too (`patch_sequence`, `identity_patch_embed`,
`filter_principal_components`, `position_similarity`, `attention_weights`, `attention_rollout`,
`fit_pca`, `pca_colours`, `patch_similarity`, ...). matplotlib is an optional dependency, the `viz` extra: `pip install 'vitzoo[viz]'`; it is
imported only when a picture is drawn (`require_matplotlib` imports it, or names the extra). Modules:
images (reading and fitting images), patches, patch_embedding, position_embedding, attention_maps,
curves, pca (the numbers of the dense-feature pictures) and dense_maps (their pictures); the `vitzoo viz ...` command is vitzoo/commands/viz.py.
"""

from __future__ import annotations

from ._figure import require_matplotlib
from .attention_maps import (
    attention_rollout,
    attention_weights,
    class_token_attention,
    plot_attention,
    rollout_map,
)
from .curves import plot_curves, read_metrics
from .dense_maps import DenseImage, dense_images, plot_pca, plot_similarity, read_mask
from .images import prepare_image, read_image, synthetic_image
from .patch_embedding import filter_principal_components, identity_patch_embed, plot_patch_embedding, unpatchify
from .patches import patch_sequence, plot_patches
from .pca import PCA, PictureInputError, first_component_foreground, fit_pca, patch_similarity, pca_colours
from .position_embedding import plot_position_embedding, position_similarity

__all__ = [
    "PCA",
    "DenseImage",
    "PictureInputError",
    "attention_rollout",
    "attention_weights",
    "class_token_attention",
    "dense_images",
    "filter_principal_components",
    "first_component_foreground",
    "fit_pca",
    "identity_patch_embed",
    "patch_sequence",
    "patch_similarity",
    "pca_colours",
    "plot_attention",
    "plot_curves",
    "plot_patch_embedding",
    "plot_patches",
    "plot_pca",
    "plot_position_embedding",
    "plot_similarity",
    "position_similarity",
    "prepare_image",
    "read_image",
    "read_mask",
    "read_metrics",
    "require_matplotlib",
    "rollout_map",
    "synthetic_image",
    "unpatchify",
]
