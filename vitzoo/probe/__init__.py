"""Using a frozen backbone as people do: embeddings cached once, then evaluated.

    from vitzoo.probe import extract_to_file, load_features, recall_at_k
    extract_to_file(model, splits, "feats.safetensors")               # `vitzoo features`
    feats = load_features("feats.safetensors")
    recall_at_k(image_emb, text_emb, image_to_texts, ks=(1, 5, 10))   # {1: 0.52, 5: 0.78, 10: 0.86}

Modules: extract (embeddings of a dataset, resumable), featurefile (the cached file: `Features`,
`save_features`, `load_features`), retrieval (recall@k over paired embeddings, cosine similarity).
"""

from __future__ import annotations

from .extract import OUTPUTS, embed, extract_features, extract_to_file
from .featurefile import Features, FeaturesFileError, load_features, save_features
from .retrieval import image_text_recall, ranks, recall_at_k

__all__ = [
    "OUTPUTS",
    "Features",
    "FeaturesFileError",
    "embed",
    "extract_features",
    "extract_to_file",
    "image_text_recall",
    "load_features",
    "ranks",
    "recall_at_k",
    "save_features",
]
